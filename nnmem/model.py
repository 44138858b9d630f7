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
"""

import contextlib
import traceback
from collections.abc import Hashable
from typing import NamedTuple

from nnmem import autograd, checkpoint
from nnmem.checkpoint import CheckpointError  # noqa: F401 (re-exported)
from nnmem.graph.concurrency import check_mode as check_concurrency
from nnmem.graph.executor import CompiledStep, PlanTooLarge
from nnmem.graph.offload import POLICIES
from nnmem.graph.recompute import STRATEGIES
from nnmem.graph.recorder import Recorder
from nnmem.interrupts import deferred_interrupts
from nnmem.layer import Layer
from nnmem.memory import format_bytes, parse_bytes
from nnmem.memory.cache import TensorCache
from nnmem.memory.errors import OutOfMemory
from nnmem.tensor import Tensor

#: offload="dyn": the caps on a convolution's workspace tried in turn (None: no cap; 0: the
#: direct algorithm everywhere).
WORKSPACE_LIMITS = (None, 64 * 2**20, 16 * 2**20, 4 * 2**20, 2**20, 0)


class _NoOptimizer:
    def __call__(self, loss):
        raise RuntimeError(
            "this model has no optimizer: call model.set_optimizer(opt.SGD(lr=0.01)) "
            "before training"
        )


class Model(Layer):
    TENSOR_DICT_FILENAME = checkpoint.TENSOR_DICT_FILENAME  # SINGA's names, kept on Model
    STATES_ATTR_FILENAME = checkpoint.STATES_ATTR_FILENAME
    MODEL_STATE_TYPE = checkpoint.MODEL_STATE_TYPE
    AUX_STATE_TYPE = checkpoint.AUX_STATE_TYPE

    def __init__(self):
        super().__init__()
        self.training = True
        self.graph_mode = False
        self.sequential = False
        self.recompute_strategy = "none"
        self.offload_policy, self.async_offload = "none", True
        self.concurrency = "off"
        self.initialized = False
        self.optimizer = _NoOptimizer()
        self._graphs = {}  # (training, input shapes and dtypes) -> CompiledStep
        self._buffers = None  # non-parameter states, restored after a failed step

    def set_optimizer(self, optimizer):
        self.optimizer = optimizer

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
    ):
        """Create the parameters from the inputs' shapes and fix the modes.

        use_graph: record the step and replay it as a graph; sequential: replay in recording
        order (True) or breadth-first (False); recompute: drop cheap forward results and
        rebuild them in backward, "none", "speed", "memory" or "cost-aware" (graph mode only;
        see nnmem.graph.recompute).
        offload: move activations to host memory between forward and backward, "none",
        "conv", "all" or "dyn" (vDNN's policies; see nnmem.graph.offload); budget: the most
        bytes the device pool may hold (None, a number, or text such as "1GiB"): an
        allocation above it fails like a full pool, and "dyn" picks the fastest policy
        that fits it; async_offload: vDNNExt's asynchronous engine (True) or vDNN's, which
        synchronises compute and copies at every layer's end (see nnmem.graph.engine);
        concurrency: how many threads each operation runs with, "off" (all the cores, one
        operation at a time), "auto", or the strategies "1", "1-2", "1-3", "1-4" of Runtime
        Concurrency Control and Operation Scheduling (graph mode on the CPU device only; see
        nnmem.graph.concurrency): the first replays profile every operation's thread count.

        The budget and eager offloading (offload without use_graph: the device's tensor cache)
        belong to the device: the last compile on a device sets them for every model on it.
        It waits for a step another thread is running on the device, and first brings back
        to the device what the previous cache moved to the host."""
        if not inputs or not all(isinstance(t, Tensor) for t in inputs):
            raise TypeError("compile(inputs): give a list of input tensors, e.g. [tx]")
        if recompute not in STRATEGIES:
            raise ValueError(f"compile(recompute={recompute!r}): choose one of {STRATEGIES}")
        if recompute != "none" and not use_graph:
            raise ValueError(
                "recomputation rewrites a recorded step: compile with "
                "use_graph=True to use recompute=" + repr(recompute)
            )
        if offload not in POLICIES:
            raise ValueError(f"compile(offload={offload!r}): choose one of {POLICIES}")
        if offload == "dyn" and budget is None:
            raise ValueError(
                "compile(offload='dyn') picks the fastest policy that fits a budget: give one, "
                "e.g. budget='1GiB'"
            )
        if not isinstance(async_offload, bool):
            raise TypeError(f"compile(async_offload={async_offload!r}): give True or False")
        check_concurrency(concurrency)
        dev = inputs[0].device
        if concurrency != "off":
            if not use_graph:
                raise ValueError(
                    f"compile(concurrency={concurrency!r}) controls a recorded step's threads: "
                    "compile with use_graph=True"
                )
            if dev.kind != "cpu":
                raise ValueError(
                    f"compile(concurrency={concurrency!r}): thread counts are for the CPU device "
                    f"(this is a {dev.kind} device); leave concurrency='off'"
                )
            if offload != "none":
                raise ValueError(
                    f"compile(concurrency={concurrency!r}, offload={offload!r}): the two cannot "
                    "be combined yet (the transfer engine orders the calls itself)"
                )
            if sequential and concurrency in ("1-3", "1-4", "auto"):
                raise ValueError(
                    f"compile(concurrency={concurrency!r}) co-runs operations as BFS finds them "
                    "ready: compile with sequential=False, or use concurrency='1-2'"
                )
            check_concurrency(concurrency, dev)
        budget = None if budget is None else _budget_bytes(budget, dev)
        # eager offloading is the device's tensor cache ("dyn": the cache moves tensors only
        # when memory runs short, which is already dynamic, so it keeps every candidate)
        eager_offload = offload != "none" and not use_graph
        # The budget, the cache and the dry run switch are the device's: changed under its lock,
        # so never in the middle of another thread's step on the device.
        with dev.lock:
            if dev.cache is not None:
                dev.cache.bring_back()  # what it evicted (outputs kept by the user) comes back
            dev.pool.budget = budget
            dev.cache = (
                TensorCache(dev, "conv" if offload == "conv" else "all") if eager_offload else None
            )
            self.recompute_strategy = recompute
            self.offload_policy, self.async_offload = offload, async_offload
            self.concurrency = concurrency
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
                with compiled.device.lock:  # it may move the arena other steps replay in
                    compiled.compile(sequential)
        self.sequential = sequential

    def compiled_step(self, *inputs, **kwargs):
        """The CompiledStep recorded for these arguments in the current mode (None if none
        yet): its memory_summary(), describe() and timeline show what graph mode did."""
        return self._graphs.get(self._graph_key(inputs, kwargs))

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

        All or nothing: if the step fails (out of memory, Ctrl-C, a bad label), parameters,
        optimizer state and the buffers the step updates (BatchNorm's running statistics) are
        as they were before it; what it allocated goes back to the pool. One step at a time
        runs on a device: a second thread's step waits for the first to end."""
        if self.training:
            # Refuse before running anything, so that BatchNorm statistics stay untouched.
            if (
                isinstance(self.optimizer, _NoOptimizer)
                and "optimizer" in type(self).train_one_batch.__code__.co_names
            ):
                self.optimizer(None)
        dev = _device_of(type(self).__name__, inputs)
        before_step = getattr(self.optimizer, "before_step", None)  # DistOpt's
        if self.training and before_step is not None:
            before_step(self)
        step = self.train_one_batch if self.training else self.forward
        with dev.step():
            caller_training = autograd.training  # a model called inside another's step
            autograd.training = self.training
            before = self._before_step(dev) if self.training else None
            try:
                if not self.graph_mode or dev.recorder is not None:
                    return step(*inputs, **kwargs)  # eager (or inside another model's recording)
                return self._run_graph(dev, step, inputs, kwargs)
            except BaseException as e:
                if isinstance(e, MemoryError):
                    # The failed step's tensors are held by the frames of the traceback: drop
                    # them, so that a retry in the caller's `except` (a smaller batch) has the
                    # memory. (Locals of those frames are gone from a post-mortem debugger.)
                    traceback.clear_frames(e.__traceback__)
                if before is not None and dev.commits == before.commits:
                    # failed before any update: undo the rest, all of it (a second Ctrl-C
                    # would leave BatchNorm's statistics half written back)
                    with deferred_interrupts("interrupted; the failed step was undone first"):
                        before.restore(self)
                step_failed = getattr(self.optimizer, "step_failed", None)  # DistOpt's
                if self.training and step_failed is not None:
                    step_failed(e)  # may wait for the other ranks: a Ctrl-C stops it
                raise
            finally:
                autograd.training = caller_training

    def _before_step(self, dev):
        """What a failed training step must put back (see _StateBefore). The buffers are the
        layers' own (Layer's get_params and get_states): a subclass's get_states may add
        tensors that its step has yet to create (SINGA's char_rnn.py adds the hidden state
        that its initialize() makes at the first forward)."""
        if self._buffers is None or not self.initialized:  # layers may still be created
            params = set(map(id, Layer.get_params(self).values()))
            states = Layer.get_states(self).values()
            self._buffers = [t for t in states if id(t) not in params]
        buffers = list(self._buffers)
        if dev.rng_state is not None:
            buffers.append(dev.rng_state)  # dropout's draw counter
        buffers = [t for t in buffers if t.block.allocated and dev.runs_kernels]
        copies = list(zip(buffers, dev.snapshot(buffers)))
        # An Optimizer, or one that wraps an Optimizer (DistOpt): its state made by a failed
        # step is dropped again.
        mark = self.optimizer.state_mark() if hasattr(self.optimizer, "state_mark") else None
        counter_existed = dev.rng_state is not None and dev.rng_state.block.allocated
        return _StateBefore(
            dev.commits,
            dev,
            copies,
            counter_existed,
            dev.rng.bit_generator.state,
            mark,
            len(self._graphs),
        )

    def _host_values(self, dev):
        """The Python scalars a replayed step's kernels read when they are launched: the
        optimizer's hyperparameters (Optimizer.hyperparameters) and dropout's seed. A device
        that freezes a step into one launch (CUDA graphs) captures it again when one of them
        changes."""
        hyper = getattr(self.optimizer, "hyperparameters", tuple)()
        return tuple(hyper) + (("seed", dev.seed),)

    def _graph_key(self, inputs, kwargs=None):
        """What selects a recorded graph: the mode, each tensor's shape and dtype, and every
        other argument's value (a list or tuple by its items). A value without a hash (a NumPy
        array, a dict) is refused: the step reads it while recording and the replay would
        reuse what it read then, whatever the later call passes."""

        def key(value, where):
            if isinstance(value, Tensor):
                return value.shape, value.dtype
            if isinstance(value, (list, tuple)):
                return type(value), tuple(key(v, where) for v in value)
            if not isinstance(value, Hashable):
                raise TypeError(
                    f"{type(self).__name__}(...) in graph mode: {where} is a "
                    f"{type(value).__name__}; graph mode replays the step recorded for each "
                    "value of a non-tensor argument, so pass tensors, or values with a hash "
                    "(str, int, float, None, tuples of them)"
                )
            return value

        return (
            (self.training,)
            + tuple(key(t, f"argument {i}") for i, t in enumerate(inputs))
            + tuple(
                (name, key(value, f"argument {name}="))
                for name, value in sorted((kwargs or {}).items())
            )
        )

    def _run_graph(self, dev, step, inputs, kwargs):
        key = self._graph_key(inputs, kwargs)
        compiled = self._graphs.get(key)
        tensors = _tensors_of(inputs, kwargs)
        if compiled is not None:
            return compiled.replay(tensors, lambda: self._host_values(dev))
        shapes = ", ".join("x".join(map(str, t.shape)) for t in tensors)
        label = f"{type(self).__name__} ({'training' if self.training else 'inference'}, {shapes})"
        try:
            compiled, result = self._record_and_compile(dev, step, inputs, kwargs, tensors, label)
        except OutOfMemory as e:
            e.add_note(
                f"graph mode planned this step ({label}) with recompute="
                f"{self.recompute_strategy!r} and offload={self.offload_policy!r}: "
                "compile(..., recompute='cost-aware') and offload='all' lower its peak; "
                "`nnmem plan` shows the figures of each technique beforehand"
            )
            raise
        self._graphs[key] = compiled
        if not dev.runs_kernels:  # planned, not run: values exist only on a real device
            return result
        commits = dev.commits
        try:
            return compiled.replay(tensors)
        except BaseException:
            if dev.commits == commits:  # its first run failed before the commit: keep nothing
                del self._graphs[key]  # (so the undo forgets the optimizer state it made)
                compiled.leave_arenas()
                dev.fit_arenas()  # an arena it grew shrinks back to the other steps' plans
            raise

    def _record(self, dev, step, inputs, kwargs):
        """(recorder, result): the step recorded, nothing run."""
        recorder = dev.recorder = Recorder()
        try:
            result = step(*inputs, **kwargs)
        finally:
            dev.recorder = None
        return recorder, result

    def _record_and_compile(self, dev, step, inputs, kwargs, tensors, label):
        """(CompiledStep, result). With offload="dyn" (vDNN's dynamic policy): the fastest
        policy that fits the budget with the convolutions' fastest workspaces; failing that,
        the step is recorded again with a lower cap on workspaces (the convolutions with the
        largest downgrade first: fewer samples per chunk, then the direct algorithm)."""
        limits = WORKSPACE_LIMITS if self.offload_policy == "dyn" else (dev.workspace_limit,)
        previous = dev.workspace_limit
        for limit in limits:
            dev.workspace_limit = limit
            try:
                recorder, result = self._record(dev, step, inputs, kwargs)
            finally:
                dev.workspace_limit = previous
            try:
                compiled = CompiledStep(
                    dev,
                    recorder,
                    tensors,
                    result,
                    self.sequential,
                    label,
                    self.recompute_strategy,
                    self.offload_policy,
                    synchronous_offload=not self.async_offload,
                    concurrency=self.concurrency,
                )
            except PlanTooLarge as e:
                too_large = e
                continue
            compiled.workspace_limit = limit
            return compiled, result
        error = OutOfMemory(
            request=too_large.needed,
            free_bytes=too_large.budget,
            largest_free_block=too_large.budget,
            capacity=too_large.budget,
            requester=f"{label} with offload='dyn' and direct convolutions (no workspace)",
        )
        error.add_note(
            f"offload='dyn' tried every policy and workspace: the smallest plan (offload='all', "
            f"direct convolutions) needs {too_large.needed} bytes of pool, the budget is "
            f"{too_large.budget}; raise the budget or use a smaller batch"
        )
        raise error

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
            return checkpoint.load(fpath, mine)


class _StateBefore(NamedTuple):
    """A training step's undo record, for a step that fails before its commit (before any
    parameter is updated): the values of the buffers forward changes (BatchNorm's running
    statistics, dropout's draw counter; host copies of a few numbers per channel), the random
    generator's state (so a failed step draws no mask), and the optimizer state that existed
    (state made while recording a graph that never got compiled is dropped again)."""

    commits: int
    device: object
    copies: list
    counter_existed: bool  # dropout's draw counter (made by the first draw: maybe in this step)
    rng_state: dict
    optimizer_mark: object
    graphs: int

    def restore(self, model):
        dev = self.device
        # The copies were queued on the compute stream (a GPU may still be making them); only
        # that stream is waited for: an unrelated copy's error must not stop the undo.
        dev.compute_stream.synchronize()
        for t, value in self.copies:
            t.copy_from_numpy(value)
        if not self.counter_existed and dev.rng_state is not None:
            dev.rng_state.set_value(0)  # made by the failed step: a retry draws the same masks
        dev.rng.bit_generator.state = self.rng_state
        if self.optimizer_mark is not None and len(model._graphs) == self.graphs:
            model.optimizer.forget_state_since(self.optimizer_mark)


def _lock_of(states):
    """The lock of the device the states live on (no lock for a model without states)."""
    first = next(iter(states.values()), None)
    return first.device.lock if first is not None else contextlib.nullcontext()


def _tensors_of(inputs, kwargs):
    """The tensors among a step's arguments, in order: positional ones (inside lists and tuples
    too), then keyword ones by name. A replay copies the data of each into the tensor recorded
    at the same position."""
    found = []

    def visit(value):
        if isinstance(value, Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)

    visit(inputs)
    visit([value for _, value in sorted(kwargs.items())])
    return tuple(found)


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


def _budget_bytes(budget, dev):
    """A budget in bytes (a number, or text such as "1.5GiB"), checked against the pool."""
    try:
        nbytes = parse_bytes(budget)
    except (TypeError, ValueError) as e:
        raise ValueError(f"compile(budget={budget!r}): {e}") from None
    if nbytes <= 0 or nbytes > dev.pool.capacity:
        raise ValueError(
            f"compile(budget={budget!r}): give a positive number of bytes no larger than the "
            f"device pool ({format_bytes(dev.pool.capacity)}), e.g. "
            f"budget='{max(dev.pool.capacity // 2**21, 1)}MiB'"
        )
    return nbytes
