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
message (nnmem/dist/fusion.py). Each exchange starts on the communication stream at once,
while backward goes on (nnmem/dist/exchange.py); the step waits for all of them only before
the updates. A failure (a timeout, Ctrl-C) happens before the commit phase: parameters,
optimizer state and sparsification residuals stay as they were (residuals change in the
commit, as the parameters do).

Before a Model's first training step, the ranks check that they built the same model and take
rank 0's parameters and buffers (nnmem/dist/model_sync.py), so that they start equal whatever
their random seeds.

This file is SINGA's interface and the order of a step; the wire formats, the fusion, the
exchanges and the model check are nnmem/dist/'s.
"""

import weakref

from nnmem import autograd
from nnmem.communicator import DEFAULT_TIMEOUT_S, Communicator, DistributedError
from nnmem.dist.exchange import Exchanges
from nnmem.dist.fusion import Fuser, check_threshold
from nnmem.dist.model_sync import broadcast_parameters, check_same_model
from nnmem.dist.wire import Wire, check_gradient_dtype, check_spars

#: SINGA's default threshold, in elements: gradients at most this large are fused
THRESHOLD = 2097152
#: what ``dist_opt(loss)`` does: SINGA's dist_option names of its examples' train_one_batch
DIST_OPTIONS = ("plain", "half", "sparseTopK", "sparseThreshold")


class DistOpt:
    """Wrap an optimizer for data-parallel training over MPI (SINGA's interface).

    opt: the optimizer every rank applies (required: SINGA's default SGD() is not assumed).
    buffSize: SINGA's fused buffer size, kept for its signature (nnmem sizes each buffer to
    its gradients). dist_option, spars: what ``dist_opt(loss)`` runs: "plain"
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
        dist_option="plain",
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
        if dist_option not in DIST_OPTIONS:
            raise ValueError(f"DistOpt(dist_option={dist_option!r}): choose one of {DIST_OPTIONS}")
        if dist_option.startswith("sparse"):
            check_spars(spars, dist_option == "sparseTopK")
        self.opt = opt
        self.buffSize = buffSize
        self.dist_option, self.spars = dist_option, spars
        self.threshold = THRESHOLD  # what dist_opt(loss) fuses below (SINGA's default)
        self.communicator = communicator or Communicator(timeout)
        self.world_size = self.communicator.world_size
        self.global_rank = self.communicator.global_rank
        self.local_rank = self.communicator.local_rank
        self._exchanges = Exchanges(self.communicator)  # with what they keep between steps
        self._synchronized = weakref.WeakSet()  # the models whose states came from rank 0
        self._outstanding = []  # finishes of all_reduce / all_reduce_half, run by wait()
        self._calls_before_step = 0  # the communicator's calls when the step began

    @property
    def wire_bytes(self):
        return self.communicator.wire_bytes

    @property
    def wait_seconds(self):
        """The time steps spent waiting for exchanges: what backward did not hide."""
        return self._exchanges.wait_seconds

    # -- SINGA's entry points -------------------------------------------------------------
    def __call__(self, loss):
        """A step as ``dist_option`` says (SINGA's __call__ is backward_and_update): a model whose
        train_one_batch calls ``self.optimizer(loss)`` trains with any of them."""
        if self.dist_option == "plain":
            self.backward_and_update(loss, self.threshold)
        elif self.dist_option == "half":
            self.backward_and_update_half(loss, self.threshold)
        else:
            top_k = self.dist_option == "sparseTopK"
            self.backward_and_sparse_update(loss, self.threshold, spars=self.spars, topK=top_k)

    def backward_and_update(self, loss, threshold=THRESHOLD):
        """Backward, all-reduce the gradients (fused below `threshold` elements), divide by
        the world size, update: the step of one process with world_size times the batch."""
        self._step(loss, threshold, Wire("plain"))

    def backward_and_update_half(self, loss, threshold=THRESHOLD, clipping=False, clip_Value=100):
        """As backward_and_update with the gradients rounded to float16 on the wire (half the
        bytes; float32 parameters only), optionally clipped to [-clip_Value, clip_Value]
        first so that float16 cannot overflow (its largest value is 65504)."""
        clip = float(clip_Value) if clipping else None
        if clip is not None and not clip > 0:
            raise ValueError(f"backward_and_update_half: clip_Value must be > 0, got {clip_Value}")
        self._step(loss, threshold, Wire("half", clip=clip))

    def backward_and_sparse_update(
        self, loss, threshold=THRESHOLD, spars=0.05, topK=False, corr=True
    ):
        """As backward_and_update, sending only part of each gradient: with topK, the
        ceil(spars * n) elements of largest magnitude of each exchange; else those with
        |g| >= spars. With corr, what was not sent is kept locally (the residual) and added to
        the next step's gradient, so nothing is lost, only delayed."""
        check_spars(spars, topK)
        self._step(loss, threshold, Wire("sparse", spars=float(spars), top_k=bool(topK), corr=corr))

    def backward_and_partial_update(self, loss, threshold=THRESHOLD):
        """SINGA's partial update (experimental there): every rank updates its parameters with
        its own gradients, then one *partition* of the parameters is averaged over the ranks
        (all-reduced, divided by the world size), the next one at the next step, in turn.
        Partitions as the fused buffers: a parameter above `threshold` elements alone, smaller
        ones together until they pass it. Between two visits of a partition the ranks drift
        apart; a step sends one partition. The averaging runs in the commit, after the
        updates: a rank that fails there breaks the communicator, and the job stops."""
        check_threshold(threshold)
        self._calls_before_step = self.communicator.calls
        dev = loss.device
        gradients = list(autograd.backward(loss))
        partitions = []
        fuser = Fuser(threshold, partitions.append)
        for param, _ in gradients:
            check_gradient_dtype(param, Wire("plain"))
            fuser.add(param)
        fuser.flush()

        def average_one_partition():
            for i, params in enumerate(partitions):
                turn = (i, len(partitions))
                key = ("partition", i)
                self._exchanges.queue(
                    params, Wire("plain"), key, phase="update", turn=turn, in_place_ok=True
                )()
            self._exchanges.next_turn(dev)

        self.opt.apply_gradients(gradients, dev, then=average_one_partition)

    def update(self, param, grad):
        """SINGA's: grad /= world_size, then the wrapped optimizer's update, at once."""
        grad /= self.world_size
        self.opt.update(param, grad)

    def all_reduce(self, tensor):
        """Start summing `tensor` over the ranks, in place; wait() waits for it (SINGA's)."""
        key = ("all_reduce", len(self._outstanding))  # its own staging array
        finish = self._exchanges.queue([tensor], Wire("plain"), key, scale=False, in_place_ok=True)
        self._outstanding.append(finish)

    def all_reduce_half(self, tensor):
        """all_reduce with float16 on the wire."""
        key = ("all_reduce", len(self._outstanding))
        self._outstanding.append(self._exchanges.queue([tensor], Wire("half"), key, scale=False))

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
        states = check_same_model(self.communicator, model)
        self.broadcast_parameters([t for _, t in states])
        self._synchronized.add(model)

    def broadcast_parameters(self, tensors):
        """Every rank's `tensors` = rank 0's (all received before any is written)."""
        broadcast_parameters(self.communicator, tensors)

    # -- the states a failed step drops (Model's undo record), the wrapped optimizer's ----
    def state_mark(self):
        return self.opt.state_mark()

    def forget_state_since(self, mark):
        self.opt.forget_state_since(mark)

    def hyperparameters(self):
        return self.opt.hyperparameters()

    # -- a step -------------------------------------------------------------------------
    def _step(self, loss, threshold, wire):
        check_threshold(threshold)
        dev = loss.device
        gradients, finishes = [], []
        self._calls_before_step = self.communicator.calls  # (also without a Model)
        param_of = {}  # id(gradient) -> its parameter: an exchange is keyed by what it carries

        def send(grads):
            key = tuple((param_of[id(g)].name, id(param_of[id(g)])) for g in grads)
            finishes.append(self._exchanges.queue(grads, wire, key))

        fuser = Fuser(threshold, send)
        try:
            for param, grad in autograd.backward(loss):
                check_gradient_dtype(param, wire)
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
            gradients,
            dev,
            then=(lambda: self._exchanges.commit_residuals(dev)) if keeps_residuals else None,
        )
