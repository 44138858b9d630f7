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

Arguments other than tensors pass through to ``train_one_batch`` as they are, in both modes
(SINGA's ``model(tx, ty, dist_option, spars)``). In graph mode they select the recorded graph:
a step recorded with ``dist_option='plain'`` is not replayed for another value. Tensors may
also come in a list or tuple (SINGA's RNNs take one tensor per time step) or by keyword; each
is an input of the recorded step, copied in at every replay.

Its parts: compile's options are a StepOptions, checked there (nnmem.step_options); graph
mode's compiled steps are kept in a StepCache (nnmem.step_cache); what a failed training step
puts back is its UndoRecord (nnmem.undo).
"""

import contextlib
import dataclasses
import functools
import traceback

from nnmem import autograd, checkpoint
from nnmem.checkpoint import CheckpointError  # load_states raises it: model.CheckpointError
from nnmem.layer import Layer
from nnmem.memory.cache import TensorCache
from nnmem.optim.mixed_precision import LossScaler
from nnmem.step_cache import StepCache
from nnmem.step_options import StepOptions
from nnmem.tensor import Tensor, float16
from nnmem.undo import UndoRecord


class _NoOptimizer:
    """A model's optimizer until set_optimizer: a training step fails with what to do, as does
    any other use (SINGA's self.optimizer.backward_and_update(loss)); the hooks Model calls on
    every optimizer around a step do nothing."""

    def __call__(self, loss):
        raise RuntimeError(
            "this model has no optimizer: call model.set_optimizer(opt.SGD(lr=0.01)) "
            "before training"
        )

    def __getattr__(self, name):  # any other use: optimizer.backward_and_update(loss), ...
        if name.startswith("_"):  # Python's own probes (copy, pickle) find nothing, as usual
            return object.__getattribute__(self, name)
        self(None)  # raises what to do

    def before_step(self, model):
        pass

    def step_failed(self, error):
        pass

    def state_mark(self):
        return None

    def forget_state_since(self, mark):
        pass

    def hyperparameters(self):
        return ()


class Model(Layer):
    TENSOR_DICT_FILENAME = checkpoint.TENSOR_DICT_FILENAME  # SINGA's names, kept on Model
    STATES_ATTR_FILENAME = checkpoint.STATES_ATTR_FILENAME
    MODEL_STATE_TYPE = checkpoint.MODEL_STATE_TYPE
    AUX_STATE_TYPE = checkpoint.AUX_STATE_TYPE

    def __init__(self):
        super().__init__()
        self.training = True
        self.step_options = StepOptions()  # compile's, checked (graph() sets the modes)
        self.initialized = False
        self.optimizer = _NoOptimizer()
        self._graphs = StepCache(type(self).__name__)
        self._buffers = None  # non-parameter states, restored after a failed step

    @property
    def graph_mode(self):
        """SINGA's: whether a call records the step and replays it (compile, graph set it)."""
        return self.step_options.use_graph

    @property
    def sequential(self):
        """SINGA's: whether a graph replays in recording order (else breadth-first)."""
        return self.step_options.sequential

    def set_optimizer(self, optimizer):
        """The optimizer of train_one_batch's ``self.optimizer(loss)``; with mixed precision it
        gets a LossScaler (master weights, dynamic loss scaling) unless it has one."""
        self.optimizer = optimizer
        if self.step_options.precision == "float32" or isinstance(optimizer, _NoOptimizer):
            return
        if "loss_scaler" not in vars(optimizer):
            raise TypeError(
                "precision='float16' needs an optimizer with master weights and loss scaling "
                f"(nnmem.opt's SGD, Adam, ...); {type(optimizer).__name__} has none"
            )
        if optimizer.loss_scaler is None:
            optimizer.loss_scaler = LossScaler()

    def compile(
        self,
        inputs,
        is_train=True,
        use_graph=False,
        sequential=False,
        recompute="none",
        offload="none",
        budget=None,
        async_offload=True,
        concurrency="off",
        memory="heuristic",
        fuse=True,
        precision="float32",
    ):
        """Create the parameters from the inputs' shapes and fix the modes.

        use_graph: record the step and replay it as a graph; sequential: replay in recording
        order (True) or breadth-first (False); recompute: drop cheap forward results and
        rebuild them in backward, the recompute policy "none", "speed", "memory" or "cost-aware"
        (graph mode only; see nnmem.graph.recompute).
        offload: move activations to host memory between forward and backward, "none",
        "conv", "all" or "dyn" (vDNN's policies; see nnmem.graph.offload); budget: the most
        bytes the device pool may hold (None, a number, or text such as "1GiB"): an
        allocation above it fails like a full pool, and "dyn" picks the fastest policy
        that fits it; async_offload: vDNNExt's asynchronous engine (True) or vDNN's, which
        synchronises compute and copies at every layer's end (see nnmem.graph.engine);
        concurrency: how many threads each operation runs with, "off" (all the cores, one
        operation at a time), "auto", or the policies "1", "1-2", "1-3", "1-4" (which strategies
        of Runtime Concurrency Control and Operation Scheduling apply; graph mode on the CPU
        device only; see nnmem.graph.concurrency): the first replays profile every operation's
        thread count.
        memory: "heuristic" (the default: the policies above decide) or "optimal": the
        fastest plan within `budget`, keep, recompute or offload chosen per tensor by a MILP
        solver (graph mode; see nnmem.graph.optimal); ``step.memory_decisions()`` lists them.
        fuse: graph mode's fusion pass (nnmem.graph.fuse): BatchNorm + ReLU, BatchNorm + Add +
        ReLU and bias + ReLU, forward and backward, each one kernel call; the numbers stay the
        unfused step's, bit for bit. ``fuse=False`` records the step as the operators ran it.
        precision: "float32", or "float16": mixed precision (nnmem.optim.mixed_precision):
        float inputs are cast to float16 as a step begins, so parameters, activations and
        gradients are stored in float16 (half the bytes), while the optimizer updates float32
        master weights, with dynamic loss scaling (a step whose gradients overflow is skipped
        and changes nothing; ``model.optimizer.loss_scaler`` holds the scale and the counts).

        The budget and eager offloading (offload without use_graph: the device's tensor cache)
        belong to the device: the last compile on a device sets them for every model on it.
        It waits for a step another thread is running on the device, and first brings back
        to the device what the previous cache moved to the host."""
        if not inputs or not all(isinstance(t, Tensor) for t in inputs):
            raise TypeError("compile(inputs): give a list of input tensors, e.g. [tx]")
        dev = inputs[0].device
        options = StepOptions(
            use_graph,
            sequential,
            recompute,
            offload,
            budget,
            async_offload,
            concurrency,
            memory,
            fuse,
            precision,
        ).check(dev)
        if precision != "float32" and self.initialized:
            wide = [(n, p.dtype) for n, p in self.get_params().items() if p.dtype != float16]
            if wide:
                raise ValueError(
                    f"compile(precision={precision!r}): this model's parameters were made in "
                    f"{wide[0][1]} ({wide[0][0]}, ...); mixed precision makes them in "
                    "float16: compile a new model with precision='float16'"
                )
        # eager offloading is the device's tensor cache ("dyn": the cache moves tensors only
        # when memory runs short, which is already dynamic, so it keeps every candidate)
        eager_offload = offload != "none" and not use_graph
        # The budget, the cache and the dry run switch are the device's: changed under its lock,
        # so never in the middle of another thread's step on the device.
        with dev.lock:
            dev.set_memory_budget(
                options.budget,
                TensorCache(dev, "conv" if offload == "conv" else "all") if eager_offload else None,
            )
            # The techniques now; the modes stay until graph() below, which re-plans the graphs
            # recorded already if the order changes.
            self.step_options = dataclasses.replace(
                options, use_graph=self.graph_mode, sequential=self.sequential
            )
            previous = autograd.training
            autograd.training = is_train
            try:
                with dev.dry_run_pass():
                    self.forward(*self._entry(inputs))
            finally:
                autograd.training = previous
        self.graph(use_graph, sequential)
        self.train(is_train)
        self.get_states()  # names every parameter and state (conv1.W, ...) for optimizers
        self.initialized = True
        self.set_optimizer(self.optimizer)  # a loss scaler for mixed precision, or none

    def _entry(self, inputs):
        """The step's inputs as its first layer sees them: float tensors cast to float16 for
        mixed precision (inside the step: a recorded graph casts at every replay)."""
        if self.step_options.precision == "float32":
            return inputs
        return tuple(_as_half(x) for x in inputs)

    def graph(self, mode=True, sequential=False):
        """Turn graph mode on or off, with serial (sequential=True) or BFS order. Graphs
        already recorded are re-planned for the new order (not recorded again)."""
        self.step_options = dataclasses.replace(self.step_options, use_graph=mode)
        if sequential != self.sequential:
            for compiled in self._graphs.values():
                with compiled.device.lock:  # it may move the arena other steps replay in
                    compiled.replan(sequential)
        self.step_options = dataclasses.replace(self.step_options, sequential=sequential)

    def compiled_step(self, *inputs, **kwargs):
        """The CompiledStep recorded for these arguments in the current mode (None if none
        yet): its memory_summary(), describe() and timeline show what graph mode did."""
        return self._graphs.find(self.training, inputs, kwargs)

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
        """One step: train_one_batch in training mode, forward in inference mode.

        All or nothing: if the step fails (out of memory, Ctrl-C, a bad label, no optimizer),
        parameters, optimizer state and the buffers the step updates (BatchNorm's running
        statistics) are as they were before it (see nnmem.undo); what it allocated goes back
        to the pool. One step at a time runs on a device: a second thread's step waits for
        the first to end."""
        dev = _device_of(type(self).__name__, inputs)
        if self.training:
            self.optimizer.before_step(self)  # DistOpt's synchronises the ranks' models
        step = self.train_one_batch if self.training else self.forward
        if self.step_options.precision != "float32":
            step = functools.partial(_entered, self, step)
        with dev.step():
            caller_training = autograd.training  # a model called inside another's step
            autograd.training = self.training
            before = None
            if self.training:
                before = UndoRecord.record(dev, self._undo_buffers(), self.optimizer, self._graphs)
            try:
                if not self.graph_mode or dev.recorder is not None:
                    result = step(*inputs, **kwargs)  # eager (or in another model's recording)
                else:
                    host_values = functools.partial(self._host_values, dev)
                    result = self._graphs.run(
                        dev, step, self.training, inputs, kwargs, self.step_options, host_values
                    )
                if self.training and _skipped(self.optimizer):
                    before.restore()  # an overflow: the step changes nothing (graph/skipped.py)
                return result
            except BaseException as e:
                if isinstance(e, MemoryError):
                    # The failed step's tensors are held by the frames of the traceback: drop
                    # them, so that a retry in the caller's `except` (a smaller batch) has the
                    # memory. (Locals of those frames are gone from a post-mortem debugger.)
                    traceback.clear_frames(e.__traceback__)
                if before is not None:
                    before.restore()
                if self.training:
                    self.optimizer.step_failed(e)  # DistOpt's may wait for the other ranks
                raise
            finally:
                autograd.training = caller_training

    def _undo_buffers(self):
        """The states a failed training step must put back (see nnmem.undo), other than the
        parameters: the layers' own (Layer's get_params and get_states). A subclass's
        get_states may add tensors that its step has yet to create (SINGA's char_rnn.py adds
        the hidden state that its initialize() makes at the first forward)."""
        if self._buffers is None or not self.initialized:  # layers may still be created
            params = set(map(id, Layer.get_params(self).values()))
            states = Layer.get_states(self).values()
            self._buffers = [t for t in states if id(t) not in params]
        return self._buffers

    def _host_values(self, dev):
        """The Python scalars a replayed step's kernels read when they are launched: the
        optimizer's hyperparameters (Optimizer.hyperparameters) and dropout's seed. A device
        that freezes a step into one launch (CUDA graphs) captures it again when one of them
        changes."""
        scaler = _loss_scaler(self.optimizer)  # its scale: the seed and the unscale read it
        scale = () if scaler is None else (("loss scale", scaler.scale),)
        return tuple(self.optimizer.hyperparameters()) + (("seed", dev.seed),) + scale

    # -- checkpoints in SINGA's format --------------------------------------------------------
    def save_states(self, fpath, aux_states=None):
        """Write a zip holding tensor_dict.npz (every state as an array) and states_attr.json
        (each state's type, shape and dtype). Overwrites `fpath` atomically: a failed or
        interrupted save leaves the previous file as it was (see nnmem.checkpoint)."""
        states = self.get_states()
        with _lock_of(states):  # the values of one moment, not of a step half-way
            checkpoint.save(fpath, states, aux_states or {})

    def load_states(self, fpath):
        """Read a checkpoint written by save_states (no pickle is ever loaded); set the model's
        states and return the auxiliary states as {name: Tensor}. Everything is checked, and
        the auxiliary tensors allocated, before anything is written, so a bad file leaves the
        model as it was; what a file may make it read is bounded by what the model expects
        (see nnmem.checkpoint)."""
        mine = self.get_states()
        if not mine:
            raise CheckpointError(
                "load_states: the model has no parameters yet; call "
                "model.compile([tx], ...) first so that its layers create them"
            )
        with _lock_of(mine):  # not in the middle of another thread's step
            aux = checkpoint.load(fpath, mine)
            if _loss_scaler(self.optimizer) is not None:
                self.optimizer.loss_scaler.refresh_masters()  # the loaded float16 parameters
            return aux


def _entered(model, step, *inputs, **kwargs):
    """step(...) on the inputs as Model._entry gives them (a top-level function: picklable)."""
    return step(*model._entry(inputs), **kwargs)


def _loss_scaler(optimizer):
    """The optimizer's LossScaler (mixed precision), or None: also for an optimizer of another
    kind (DistOpt, _NoOptimizer), whose attribute lookups must not be asked for it."""
    return vars(optimizer).get("loss_scaler")


def _skipped(optimizer):
    """Did the optimizer's loss scaler skip the step just run (a gradient overflowed)?"""
    scaler = _loss_scaler(optimizer)
    return scaler is not None and scaler.last_step_skipped


def _as_half(x):
    """A float tensor (or a list of them) cast to float16; anything else as it is."""
    if isinstance(x, (list, tuple)):
        return type(x)(_as_half(t) for t in x)
    if isinstance(x, Tensor) and x.dtype.kind == "f" and x.dtype != float16:
        return x.as_type(float16)
    return x


def _lock_of(states):
    """The lock of the device the states live on (no lock for a model without states)."""
    first = next(iter(states.values()), None)
    return first.device.lock if first is not None else contextlib.nullcontext()


def _device_of(model_name, inputs):
    """The device of a step's first input tensor (a list of tensors counts, as in SINGA's
    RNN examples); a TypeError that says what to pass when there is none."""
    for value in inputs[:1]:
        first = value[0] if isinstance(value, (list, tuple)) and value else value
        if isinstance(first, Tensor):
            return first.device
    given = type(inputs[0]).__name__ if inputs else "nothing"
    raise TypeError(
        f"{model_name}(...): the first input is {given}, not a Tensor; copy the "
        "data into a tensor first: tx = tensor.from_numpy(x, dev), or "
        "tx.copy_from_numpy(x) into a PlaceHolder"
    )
