"""DistOpt: data-parallel training, SINGA's ``opt.DistOpt`` over MPI (nnmem.communicator).

Every rank (process) holds the whole model and trains on its own part of each batch; after
backward the ranks sum their gradients (all-reduce) and each divides by the world size, so
every rank applies the same mean gradient and the parameters stay equal everywhere. With
batch B on each of N ranks a step is the step of one process with batch N * B (up to the
order of float32 sums): the loss is a mean over the batch, and the mean of N means of B is
the mean over N * B.

How a step exchanges gradients (SINGA's backward_and_update): autograd yields each gradient
as soon as it is final; a gradient larger than ``threshold`` elements is all-reduced alone;
smaller ones are gathered until more than ``threshold`` elements have come, and go as one
message: few large messages instead of many small ones, whose latency would dominate. Each
message is a *buffer*, a tensor in the device pool (graph mode plans its bytes like any
other), not the gradients' own bytes, which SINGA sums in place: backward may still read a
gradient it yielded (Add hands one tensor to both its inputs), and the collective writes its
buffer while backward goes on. Each exchange starts on the communication stream at once, while
backward goes on; the step waits for all of them only before the updates.

Each exchange is two device operations, so that graph mode records them like any other
kernel call: *start* (pack the gradients into the buffer, queue the collective) and *finish*
(wait for it, divide by the world size, unpack). Both read and write one tiny counter tensor,
so that every scheduler (breadth-first replay, co-running operations) keeps the collectives
in the order they were recorded, the same on every rank. A failure (a timeout, Ctrl-C)
happens before the commit phase: parameters, optimizer state and sparsification residuals
stay as they were (residuals change in the commit, as the parameters do).

Memory: a fused buffer lives from its start to its finish; on a device whose memory the host
cannot read (CUDA) each is staged through a pinned host array of its size, kept for the next
step.

Before a Model's first training step, the ranks check that they built the same model (a digest
of the states' names, shapes and dtypes, then the first difference named on every rank) and
take rank 0's parameters and buffers (a broadcast), so that they start equal whatever their
random seeds.
"""

import math
import time
import weakref

import numpy as np

from nnmem import autograd
from nnmem.communicator import DEFAULT_TIMEOUT_S, Communicator, DistributedError
from nnmem.tensor import Tensor, to_numpy

#: SINGA's default threshold, in elements: gradients at most this large are fused
THRESHOLD = 2097152
#: what ``dist_opt(loss)`` does: SINGA's dist_option names of its examples' train_one_batch
EXCHANGES = ("plain", "half", "sparseTopK", "sparseThreshold")


class _Wire:
    """How an exchange puts values on the wire: plain, half, or sparse (see Communicator)."""

    def __init__(self, kind, clip=None, spars=None, top_k=False, corr=True):
        self.kind, self.clip = kind, clip
        self.spars, self.top_k, self.corr = spars, top_k, corr


class DistOpt:
    """Wrap an optimizer for data-parallel training over MPI (SINGA's interface).

    opt: the optimizer every rank applies (required: SINGA's default SGD() is not assumed).
    buffSize: SINGA's fused buffer size, kept for its signature (nnmem sizes each buffer to
    its gradients). exchange, spars: what ``dist_opt(loss)`` runs: "plain"
    (backward_and_update, SINGA's __call__), "half", "sparseTopK" or "sparseThreshold" (with
    `spars`). timeout: seconds a rank waits for the others in one collective before it raises
    DistributedError (a rank that died must not leave the others hanging). communicator: the
    Communicator to use (default: a new one over MPI's COMM_WORLD).

    world_size, global_rank, local_rank: SINGA's attributes (local_rank counts the ranks on
    this node: which GPU a rank takes). threshold: the fusion threshold of ``dist_opt(loss)``
    (elements). wire_bytes: the payload this rank has sent; wait_seconds: the time its steps
    waited for exchanges (the communication backward did not hide). SINGA's nccl_id
    constructor (processes of Python's multiprocessing) has no counterpart: use mpiexec."""

    def __init__(
        self,
        opt,
        nccl_id=None,
        local_rank=None,
        world_size=None,
        buffSize=4194304,
        *,
        exchange="plain",
        spars=0.05,
        timeout=DEFAULT_TIMEOUT_S,
        communicator=None,
    ):
        if nccl_id is not None or local_rank is not None or world_size is not None:
            raise ValueError(
                "DistOpt(nccl_id=..., local_rank=..., world_size=...) is SINGA's NCCL set-up "
                "for processes started by Python's multiprocessing; nnmem's DistOpt runs over "
                "MPI: give only the optimizer, and launch with mpiexec -n N python train.py"
            )
        if not callable(getattr(opt, "apply", None)):
            raise TypeError(
                f"DistOpt(opt): give the optimizer every rank applies, e.g. "
                f"opt.DistOpt(opt.SGD(lr=0.05)), not {type(opt).__name__}"
            )
        if exchange not in EXCHANGES:
            raise ValueError(f"DistOpt(exchange={exchange!r}): choose one of {EXCHANGES}")
        if exchange.startswith("sparse"):
            _check_spars(spars, exchange == "sparseTopK")
        self.opt = opt
        self.buffSize = buffSize
        self.exchange, self.spars = exchange, spars
        self.threshold = THRESHOLD  # what dist_opt(loss) fuses below (SINGA's default)
        self.wait_seconds = 0.0  # time steps spent waiting for exchanges: what was not hidden
        self.communicator = communicator or Communicator(timeout)
        self.world_size = self.communicator.world_size
        self.global_rank = self.communicator.global_rank
        self.local_rank = self.communicator.local_rank
        self._tokens = {}  # device -> the collective counter tensor every exchange updates
        self._staging = {}  # (exchange key, size, dtype) -> a pinned host array
        self._residuals = {}  # exchange key -> the sparsification residual (host, float32)
        self._left = {}  # exchange key -> the residual this step leaves, until its commit
        self._synchronized = weakref.WeakSet()  # the models whose states came from rank 0
        self._outstanding = []  # finishes of all_reduce / all_reduce_half, run by wait()
        self._turn = 0  # backward_and_partial_update: the steps taken (which partition next)
        self._calls_before_step = 0  # the communicator's calls when the step began

    @property
    def wire_bytes(self):
        return self.communicator.wire_bytes

    # -- SINGA's entry points -------------------------------------------------------------
    def __call__(self, loss):
        """A step as ``exchange`` says (SINGA's __call__ is backward_and_update): a model whose
        train_one_batch calls ``self.optimizer(loss)`` trains with any of them."""
        if self.exchange == "plain":
            self.backward_and_update(loss, self.threshold)
        elif self.exchange == "half":
            self.backward_and_update_half(loss, self.threshold)
        else:
            top_k = self.exchange == "sparseTopK"
            self.backward_and_sparse_update(loss, self.threshold, spars=self.spars, topK=top_k)

    def backward_and_update(self, loss, threshold=THRESHOLD):
        """Backward, all-reduce the gradients (fused below `threshold` elements), divide by
        the world size, update: the step of one process with world_size times the batch."""
        self._step(loss, threshold, _Wire("plain"))

    def backward_and_update_half(self, loss, threshold=THRESHOLD, clipping=False, clip_Value=100):
        """As backward_and_update with the gradients rounded to float16 on the wire (half the
        bytes; float32 parameters only), optionally clipped to [-clip_Value, clip_Value]
        first so that float16 cannot overflow (its largest value is 65504)."""
        clip = float(clip_Value) if clipping else None
        if clip is not None and not clip > 0:
            raise ValueError(f"backward_and_update_half: clip_Value must be > 0, got {clip_Value}")
        self._step(loss, threshold, _Wire("half", clip=clip))

    def backward_and_sparse_update(
        self, loss, threshold=THRESHOLD, spars=0.05, topK=False, corr=True
    ):
        """As backward_and_update, sending only part of each gradient: with topK, the
        ceil(spars * n) elements of largest magnitude of each exchange; else those with
        |g| >= spars. With corr, what was not sent is kept locally (the residual) and added to
        the next step's gradient, so nothing is lost, only delayed."""
        _check_spars(spars, topK)
        self._step(
            loss, threshold, _Wire("sparse", spars=float(spars), top_k=bool(topK), corr=corr)
        )

    def backward_and_partial_update(self, loss, threshold=THRESHOLD):
        """SINGA's partial update (experimental there): every rank updates its parameters with
        its own gradients, then one *partition* of the parameters is averaged over the ranks
        (all-reduced, divided by the world size), the next one at the next step, in turn.
        Partitions as the fused buffers: a parameter above `threshold` elements alone, smaller
        ones together until they pass it. Between two visits of a partition the ranks drift
        apart; a step sends one partition. The averaging runs in the commit, after the
        updates: a rank that fails there breaks the communicator, and the job stops."""
        _check_threshold(threshold)
        self._calls_before_step = self.communicator.calls
        dev = loss.device
        gradients = list(autograd.backward(loss))
        partitions = []
        fuser = _Fuser(threshold, partitions.append)
        for param, _ in gradients:
            _check_dtype(param, _Wire("plain"))
            fuser.add(param)
        fuser.flush()

        def average_one_partition():
            for i, params in enumerate(partitions):
                turn = (i, len(partitions))
                key = ("partition", i)
                self._exchange(
                    params, _Wire("plain"), key, phase="update", turn=turn, in_place_ok=True
                )()
            self._next_turn(dev)

        self.opt.apply_gradients(gradients, dev, then=average_one_partition)

    def update(self, param, grad):
        """SINGA's: grad /= world_size, then the wrapped optimizer's update, at once."""
        grad /= self.world_size
        self.opt.update(param, grad)

    def all_reduce(self, tensor):
        """Start summing `tensor` over the ranks, in place; wait() waits for it (SINGA's)."""
        key = ("all_reduce", len(self._outstanding))  # its own staging array
        finish = self._exchange([tensor], _Wire("plain"), key, scale=False, in_place_ok=True)
        self._outstanding.append(finish)

    def all_reduce_half(self, tensor):
        """all_reduce with float16 on the wire."""
        key = ("all_reduce", len(self._outstanding))
        self._outstanding.append(self._exchange([tensor], _Wire("half"), key, scale=False))

    def wait(self):
        """Wait for every all_reduce started (SINGA's: the communication streams)."""
        outstanding, self._outstanding = self._outstanding, []
        for finish in outstanding:
            finish()

    # -- before a model's step -----------------------------------------------------------
    def before_step(self, model):
        """Model runs it before each training step: before the first, the ranks synchronise
        the model."""
        self.synchronize_model(model)
        self._calls_before_step = self.communicator.calls

    def step_failed(self, error):
        """Model runs it when a training step fails (eager or replayed). If the step had
        queued exchanges, the ranks can no longer agree on which collective comes next (this
        rank may have failed alone, the others went on): the communicator is broken (every
        later call raises; the job is aborted at exit). Its collectives still in flight end
        first (they write into bytes the pool may hand out again), except after Ctrl-C, which
        every rank gets at its own point of the step: nothing would end them but the
        timeout."""
        comm = self.communicator
        if comm.calls == self._calls_before_step:
            return  # nothing was exchanged: the ranks still agree
        if not isinstance(error, KeyboardInterrupt):
            try:
                comm.quiesce()
            except DistributedError:
                return  # broken by the timeout
        comm.break_off(f"a step failed on rank {self.global_rank} during its exchanges ({error!r})")

    def synchronize_model(self, model):
        """Check that every rank built the same model, then give every rank rank 0's states
        (parameters and buffers). Model runs it before its first training step; a model
        already synchronised is left alone."""
        if model in self._synchronized:
            return
        states = sorted(model.get_states().items())
        self.communicator.check_same(
            "models (state names, shapes, dtypes)",
            [(name, tuple(t.shape), str(np.dtype(t.dtype))) for name, t in states],
        )
        self.broadcast_parameters([t for _, t in states])
        self._synchronized.add(model)

    def broadcast_parameters(self, tensors):
        """Every rank's `tensors` = rank 0's (all received before any is written)."""
        values = [to_numpy(t) for t in tensors]
        comm = self.communicator
        for t, value in zip(tensors, values):
            comm.call(f"broadcast of {t.name}", comm.broadcast, value)
        if self.global_rank != 0:
            for t, value in zip(tensors, values):
                t.copy_from_numpy(value)

    # -- the states a failed step drops (Model's undo record), the wrapped optimizer's ----
    def state_mark(self):
        return self.opt.state_mark()

    def forget_state_since(self, mark):
        self.opt.forget_state_since(mark)

    def hyperparameters(self):
        return self.opt.hyperparameters()

    # -- a step -------------------------------------------------------------------------
    def _step(self, loss, threshold, wire):
        _check_threshold(threshold)
        dev = loss.device
        gradients, finishes = [], []
        self._calls_before_step = self.communicator.calls  # (also without a Model)
        param_of = {}  # id(gradient) -> its parameter: an exchange is keyed by what it carries

        def send(grads):
            key = tuple((param_of[id(g)].name, id(param_of[id(g)])) for g in grads)
            finishes.append(self._exchange(grads, wire, key))

        fuser = _Fuser(threshold, send)
        try:
            for param, grad in autograd.backward(loss):
                _check_dtype(param, wire)
                gradients.append((param, grad))
                param_of[id(grad)] = param
                fuser.add(grad)
            fuser.flush()
            for finish in finishes:
                finish()
        except BaseException as e:  # also without a Model (plain autograd), which calls it too
            self.step_failed(e)
            raise
        keeps_residuals = wire.kind == "sparse" and wire.corr
        self.opt.apply_gradients(
            gradients, dev, then=(lambda: self._commit_residuals(dev)) if keeps_residuals else None
        )

    def _exchange(
        self, grads, wire, key, scale=True, phase="backward", turn=None, in_place_ok=False
    ):
        """Queue the start of one exchange of `grads` (device operations: recorded in graph
        mode); return the function that queues its finish. key: what the exchange carries
        (its staging array and residual are kept under it); phase: the recording's phase of
        both operations; turn: (i, n) to run only in the steps whose partial-update turn is
        i modulo n (read when the step runs, so a replayed graph takes turns too);
        in_place_ok: a single tensor may be summed in its own bytes (a gradient may not:
        backward can still be reading it, e.g. Add hands one tensor to both its inputs)."""
        dev = grads[0].device
        comm, kernels, token = self.communicator, dev.kernels, self._token(dev)
        in_place = in_place_ok and len(grads) == 1 and wire.kind == "plain"
        if in_place:
            buffer = grads[0]
        else:
            buffer = Tensor(
                (sum(g.size() for g in grads),),
                dev,
                grads[0].dtype,
                requires_grad=False,
                name=f"DistOpt fused buffer {key}",
            )
        what = f"{wire.kind} all-reduce of {_names(grads)}"
        pending = {}  # the collective in flight: from start to finish

        def start(buf_, token_, _token, *grads_):
            kernels.increment(token_)
            pending["skip"] = turn is not None and self._turn % turn[1] != turn[0]
            if pending["skip"]:
                return
            flat = buf_.reshape(-1)
            offset = 0
            for g_ in grads_:
                kernels.copy(flat[offset : offset + g_.size], g_.reshape(-1))
                offset += g_.size
            pending["staged"], values = self._to_host(flat, key, dev, what)
            pending["handle"] = comm.submit(what, self._collective, wire, values, key)

        start.runs_on_host = True  # not a kernel: a CUDA graph cannot capture it
        dev.exec(
            start,
            reads=(token, *([] if in_place else grads)),
            writes=(buffer, token),
            name=f"DistOpt:start {what}",
            phase=phase,
        )

        def finish_kernels(*arrays):  # writes: grads, token; reads: buffer, token
            grads_, token_, buf_ = arrays[: len(grads)], arrays[len(grads)], arrays[-2]
            kernels.increment(token_)
            if pending.pop("skip"):
                return
            waiting = time.perf_counter()
            left = pending.pop("handle").result()
            self.wait_seconds += time.perf_counter() - waiting
            if left is not None:
                self._left[key] = left
            flat = buf_.reshape(-1)
            staged = pending.pop("staged")
            if staged is not None:
                dev.queue_copy(flat, staged, dev.compute_stream, f"{what}: back from the host")
            if scale:
                kernels.scale(flat, 1.0 / self.world_size)
            offset = 0
            for g_ in () if in_place else grads_:
                kernels.copy(g_.reshape(-1), flat[offset : offset + g_.size])
                offset += g_.size

        finish_kernels.runs_on_host = True

        def finish():
            dev.exec(
                finish_kernels,
                reads=(buffer, token),
                writes=(*grads, token),
                name=f"DistOpt:finish {what}",
                phase=phase,
            )

        return finish

    def _collective(self, wire, values, key):
        """Run on the communication stream: the exchange itself, on host values."""
        comm = self.communicator
        if wire.kind == "plain":
            return comm.allreduce(values)
        if wire.clip is not None:
            np.clip(values, -wire.clip, wire.clip, out=values)
        if wire.kind == "half":
            return comm.allreduce_half(values)
        residual = self._residuals.get(key) if wire.corr else None
        if wire.corr and residual is None:
            residual = np.zeros(values.shape, np.float32)
        return comm.sparse_allreduce(values, residual, wire.spars, wire.top_k)

    def _to_host(self, flat, key, dev, what):
        """(staging array or None, host values): the values the collective reads and writes.
        Host memory already (the CPU device): the tensor's own bytes. Else a pinned host
        array, filled once the kernels queued before have written the gradients."""
        if isinstance(flat, np.ndarray):
            return None, flat
        slot = (key, flat.size, np.dtype(flat.dtype))
        if slot not in self._staging:
            self._staging[slot] = dev.pinned_array((flat.size,), flat.dtype)
        staged = self._staging[slot]
        dev.queue_copy(staged, flat, dev.compute_stream, f"{what}: to the host")
        dev.compute_stream.synchronize()
        return staged, staged

    def _commit_residuals(self, dev):
        """In the commit: the residuals the step's sparse exchanges left become the ones the
        next step adds (a failed step leaves the old ones)."""
        token = self._token(dev)

        def commit(_token_out, _token_in):
            self._residuals.update(self._left)
            self._left.clear()

        dev.exec(commit, reads=(token,), writes=(token,), name="DistOpt:residuals", phase="update")

    def _next_turn(self, dev):
        """In the commit: the next partition's turn (a device operation: replays take it)."""
        token = self._token(dev)

        def advance(_token_out, _token_in):
            self._turn += 1

        dev.exec(advance, reads=(token,), writes=(token,), name="DistOpt:turn", phase="update")

    def _token(self, dev):
        if dev not in self._tokens:  # a host write: persistent state, never part of a recording
            self._tokens[dev] = Tensor(
                (1,), dev, np.int32, requires_grad=False, name="DistOpt collective counter"
            ).set_value(0)
        return self._tokens[dev]


class _Fuser:
    """SINGA's grouping of tensors into messages: one larger than `threshold` elements goes
    alone; smaller ones gather (of one dtype) until together they pass it. send(list) gets
    each group as soon as it is complete; flush() sends the last."""

    def __init__(self, threshold, send):
        self.threshold, self.send, self.group = threshold, send, []

    def add(self, t):
        if t.size() > self.threshold:
            self.send([t])
            return
        if self.group and self.group[0].dtype != t.dtype:
            self.flush()
        self.group.append(t)
        if sum(g.size() for g in self.group) > self.threshold:
            self.flush()

    def flush(self):
        if self.group:
            self.send(self.group)
            self.group = []


def _check_spars(spars, top_k):
    if not (isinstance(spars, (int, float)) and math.isfinite(spars) and spars > 0):
        raise ValueError(f"DistOpt: spars must be a number > 0, got {spars!r}")
    if top_k and spars > 1:
        raise ValueError(
            f"DistOpt: with top-K, spars is the fraction of elements sent, in (0, 1]; got {spars}"
        )


def _check_threshold(threshold):
    if not (isinstance(threshold, int) and not isinstance(threshold, bool) and threshold >= 0):
        raise ValueError(
            f"DistOpt: threshold must be a whole number of elements >= 0, got {threshold!r}"
        )


def _check_dtype(param, wire):
    if np.dtype(param.dtype) == np.float16:
        raise TypeError(
            f"DistOpt: parameter {param.name} is float16; the exchanges run on float32 or float64 "
            "gradients (backward_and_update_half sends float16 on the wire): train in float32"
        )
    if wire.kind != "plain" and np.dtype(param.dtype) != np.float32:
        raise TypeError(
            f"DistOpt: {wire.kind} exchanges take float32 gradients, and parameter {param.name} "
            f"is {np.dtype(param.dtype)}; use backward_and_update"
        )


def _names(tensors):
    return f"{len(tensors)} tensor(s), {sum(t.size() for t in tensors)} elements"
