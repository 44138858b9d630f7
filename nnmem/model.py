"""Model: SINGA's user API. Subclass it, write ``forward`` and ``train_one_batch``, then
``compile([tx], is_train=True, use_graph=True, sequential=False)`` and call ``model(tx, ty)``.

``compile`` runs one forward pass on shapes alone (the device's dry run: no kernel, no memory)
so that every lazily initialised layer creates its parameters, as SINGA's compile buffers one
pass and discards it.

Graph mode (``use_graph=True``): the first call of ``model(tx, ty)`` records every kernel call
of the step (forward, loss, backward, optimizer update) without running any, as SINGA buffers
operations. The recording is compiled (ordered, its intermediate memory planned once, see
nnmem.graph) and then run; every call, the first included, runs the compiled graph. Later
calls with inputs of the same shapes replay it: ``train_one_batch`` itself does not run
again, and the same output tensors are returned, updated in place. A new input shape, or
eval(), records a graph of its own. Python code in ``train_one_batch`` that does not go
through operators (printing, branching on data) runs only at the recording, where values
do not exist yet: reading one there raises RecordingReadError.
"""
import io
import json
import zipfile
from collections.abc import Hashable

import numpy as np

from nnmem import autograd
from nnmem.graph.executor import CompiledStep
from nnmem.graph.recompute import STRATEGIES
from nnmem.graph.recorder import Recorder
from nnmem.layer import Layer
from nnmem.memory.errors import OutOfMemory
from nnmem.tensor import Tensor, from_numpy, to_numpy


class CheckpointError(ValueError):
    """A file given to load_states is not a usable checkpoint for this model."""


class _NoOptimizer:
    def __call__(self, loss):
        raise RuntimeError("this model has no optimizer: call model.set_optimizer(opt.SGD(lr=0.01)) "
                           "before training")


class Model(Layer):
    TENSOR_DICT_FILENAME = "tensor_dict.npz"
    STATES_ATTR_FILENAME = "states_attr.json"
    MODEL_STATE_TYPE = 0
    AUX_STATE_TYPE = 1

    def __init__(self):
        super().__init__()
        self.training = True
        self.graph_mode = False
        self.sequential = False
        self.recompute = "none"
        self.initialized = False
        self.optimizer = _NoOptimizer()
        self._graphs = {}  # (training, input shapes and dtypes) -> CompiledStep

    def set_optimizer(self, optimizer):
        self.optimizer = optimizer

    def compile(self, inputs, is_train=True, use_graph=False, sequential=False, recompute="none"):
        """Create the parameters from the inputs' shapes and fix the modes.

        use_graph: record the step and replay it as a graph; sequential: replay in recording
        order (True) or breadth-first (False); recompute: drop cheap forward results and
        rebuild them in backward, "none", "speed", "memory" or "cost-aware" (graph mode only;
        see nnmem.graph.recompute)."""
        if not inputs or not all(isinstance(t, Tensor) for t in inputs):
            raise TypeError("compile(inputs): give a list of input tensors, e.g. [tx]")
        if recompute not in STRATEGIES:
            raise ValueError(f"compile(recompute={recompute!r}): choose one of {STRATEGIES}")
        if recompute != "none" and not use_graph:
            raise ValueError("recomputation rewrites a recorded step: compile with "
                             "use_graph=True to use recompute=" + repr(recompute))
        self.recompute = recompute
        dev = inputs[0].device
        dev.dry_run = True
        previous = autograd.training
        autograd.training = is_train
        try:
            self.forward(*inputs)
        finally:
            dev.dry_run = False
            autograd.training = previous
        self.graph(use_graph, sequential)
        self.train(is_train)
        self.get_states()  # names every parameter and state (conv1.W, ...) for optimizers
        self.initialized = True

    def graph(self, mode=True, sequential=False):
        """Turn graph mode on or off, with serial (sequential=True) or BFS order. Graphs
        already recorded are re-planned for the new order (not recorded again)."""
        self.graph_mode = mode
        if sequential != self.sequential:
            for compiled in self._graphs.values():
                compiled.compile(sequential)
        self.sequential = sequential

    def compiled_step(self, *inputs):
        """The CompiledStep recorded for these inputs in the current mode (None if none yet):
        its memory_summary(), describe() and timeline show what graph mode did."""
        return self._graphs.get(self._graph_key(inputs))

    def train(self, mode=True):
        """Training mode: model(...) runs train_one_batch; autograd saves for backward."""
        self.training = mode
        autograd.training = mode

    def eval(self):
        """Inference mode: model(...) runs forward; BatchNorm uses its running statistics."""
        self.train(False)

    def forward(self, *inputs):
        raise NotImplementedError("a Model subclass must define forward(self, x)")

    def train_one_batch(self, *inputs, **kwargs):
        raise NotImplementedError("a Model subclass must define train_one_batch(self, x, y)")

    def __call__(self, *inputs, **kwargs):
        if self.training:
            # Refuse before running anything, so that BatchNorm statistics stay untouched.
            if isinstance(self.optimizer, _NoOptimizer) and \
                    "optimizer" in type(self).train_one_batch.__code__.co_names:
                self.optimizer(None)
        autograd.training = self.training
        step = self.train_one_batch if self.training else self.forward
        dev = inputs[0].device if inputs and isinstance(inputs[0], Tensor) else None
        if not self.graph_mode or dev is None or dev.recorder is not None:
            result = step(*inputs, **kwargs)  # eager (or inside another model's recording)
        else:
            result = self._run_graph(dev, step, inputs, kwargs)
        if dev is not None:
            dev.end_step()
        return result

    def _graph_key(self, inputs, kwargs=None):
        def key(value):
            if isinstance(value, Tensor):
                return value.shape, value.dtype
            return value if isinstance(value, Hashable) else id(value)
        return (self.training,) + tuple(key(t) for t in inputs) + tuple(
            (name, key(value)) for name, value in sorted((kwargs or {}).items()))

    def _run_graph(self, dev, step, inputs, kwargs):
        key = self._graph_key(inputs, kwargs)
        compiled = self._graphs.get(key)
        if compiled is not None:
            return compiled.replay(inputs)
        recorder = dev.recorder = Recorder()
        try:
            result = step(*inputs, **kwargs)
        finally:
            dev.recorder = None
        shapes = ", ".join("x".join(map(str, t.shape)) for t in inputs if isinstance(t, Tensor))
        label = f"{type(self).__name__} ({'training' if self.training else 'inference'}, {shapes})"
        try:
            compiled = CompiledStep(dev, recorder, inputs, result, self.sequential, label,
                                    self.recompute)
        except OutOfMemory as e:
            e.add_note(f"graph mode planned this step ({label}) with recompute="
                       f"{self.recompute!r}: compile(..., recompute='cost-aware') lowers its "
                       "peak; `nnmem plan` shows the figures of each technique beforehand")
            raise
        self._graphs[key] = compiled
        if dev.virtual:  # planned, not run: values exist only on a real device
            return result
        return compiled.replay(inputs)

    # -- checkpoints in SINGA's format --------------------------------------------------------
    def save_states(self, fpath, aux_states=None):
        """Write a zip holding tensor_dict.npz (every state as an array) and states_attr.json
        (each state's type, shape and dtype). Overwrites `fpath`."""
        aux_states = aux_states or {}
        tensors, attrs = {}, {}
        for kind, states in ((self.MODEL_STATE_TYPE, self.get_states()),
                             (self.AUX_STATE_TYPE, aux_states)):
            for name, t in states.items():
                if not isinstance(t, Tensor):
                    raise TypeError(f"save_states: {name} is a {type(t).__name__}, not a Tensor")
                tensors[name] = to_numpy(t)
                attrs[name] = {"state_type": kind, "shape": list(t.shape), "dtype": str(t.dtype)}
        buffer = io.BytesIO()
        np.savez(buffer, **tensors)
        with zipfile.ZipFile(fpath, mode="w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(self.TENSOR_DICT_FILENAME, buffer.getvalue())
            zf.writestr(self.STATES_ATTR_FILENAME, json.dumps(attrs))

    def load_states(self, fpath):
        """Read a checkpoint written by save_states (no pickle is ever loaded); set the model's
        states and return the auxiliary states as {name: Tensor}. Everything is checked before
        anything is written, so a bad file leaves the model as it was."""
        mine = self.get_states()
        if not mine:
            raise CheckpointError("load_states: the model has no parameters yet; call "
                                  "model.compile([tx], ...) first so that its layers create them")
        arrays, attrs = _read_checkpoint(fpath, self.TENSOR_DICT_FILENAME,
                                         self.STATES_ATTR_FILENAME)
        model_keys = {k for k, a in attrs.items() if a.get("state_type") == self.MODEL_STATE_TYPE}
        missing, unknown = sorted(set(mine) - model_keys), sorted(model_keys - set(mine))
        if missing or unknown:
            raise CheckpointError(f"{fpath}: the checkpoint does not match this model (missing "
                                  f"{missing}, unexpected {unknown}); was it saved from another "
                                  "model class or configuration?")
        wrong = [f"{name} is {arrays[name].shape} {arrays[name].dtype} in the file but "
                 f"{mine[name].shape} {mine[name].dtype} in the model" for name in sorted(model_keys)
                 if (arrays[name].shape, arrays[name].dtype) != (mine[name].shape, mine[name].dtype)]
        if wrong:
            raise CheckpointError(f"{fpath}: " + "; ".join(wrong))
        for name in model_keys:
            mine[name].copy_from_numpy(arrays[name])
        dev = next(iter(mine.values())).device
        return {k: from_numpy(arrays[k], dev) for k in attrs if k not in model_keys}


def _read_checkpoint(fpath, tensor_file, attr_file):
    """The arrays and attributes of a checkpoint, or CheckpointError naming what is wrong."""
    hint = "give a file written by Model.save_states"
    try:
        with zipfile.ZipFile(fpath) as zf:
            names = set(zf.namelist())
            if not {tensor_file, attr_file} <= names:
                raise CheckpointError(f"{fpath}: a zip without {tensor_file} and {attr_file}; "
                                      f"{hint}")
            attrs = json.loads(zf.read(attr_file))
            with np.load(io.BytesIO(zf.read(tensor_file)), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{fpath}: not a readable checkpoint ({type(e).__name__}: {e}); "
                              f"{hint}") from e
    if not isinstance(attrs, dict) or set(attrs) != set(arrays):
        raise CheckpointError(f"{fpath}: {attr_file} and {tensor_file} list different tensors; "
                              f"the file is corrupt or foreign; {hint}")
    return arrays, attrs
