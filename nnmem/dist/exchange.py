"""One exchange of gradients between the ranks, as two device operations, so that graph mode
records them like any other kernel call and a replay exchanges too:

- *start*: pack the gradients into a buffer and queue the collective on the communication
  stream (it runs while backward goes on);
- *finish*: wait for it, divide by the world size, unpack.

The buffer is a tensor in the device pool (graph mode plans its bytes like any other), not the
gradients' own bytes, which SINGA sums in place: backward may still read a gradient it yielded
(Add hands one tensor to both its inputs), and the collective writes its buffer while backward
goes on. It lives from its start to its finish; on a device whose memory the host cannot read
(CUDA) it is staged through a pinned host array of its size, kept for the next step.

Both operations read and write one tiny counter tensor, so that every scheduler (breadth-first
replay, co-running operations) keeps the collectives in the order they were recorded, the same
on every rank.

Contract: Exchanges.queue queues a start and returns the function that queues its finish; the
residuals a sparse exchange leaves become the next step's only in the commit
(commit_residuals), so a failed step leaves the old ones.
"""

import time

import numpy as np

from nnmem.tensor import Tensor


class Exchanges:
    """The exchanges of one DistOpt over `communicator`, and what they keep between steps:
    the counter tensors, the staging arrays, the sparse residuals and the partial update's
    turn. wait_seconds: the time steps waited for exchanges (what backward did not hide)."""

    def __init__(self, communicator):
        self.communicator = communicator
        self.wait_seconds = 0.0
        self.turn = 0  # backward_and_partial_update: the steps taken (which partition next)
        self.tokens = {}  # device -> the collective counter tensor every exchange updates
        self.staging = {}  # (exchange key, size, dtype) -> a pinned host array
        self.residuals = {}  # exchange key -> the sparsification residual (host, float32)
        self.left = {}  # exchange key -> the residual this step leaves, until its commit

    def queue(self, grads, wire, key, scale=True, phase="backward", turn=None, in_place_ok=False):
        """Queue the start of one exchange of `grads` (device operations: recorded in graph
        mode); return the function that queues its finish. key: what the exchange carries
        (its staging array and residual are kept under it); phase: the recording's phase of
        both operations; turn: (i, n) to run only in the steps whose partial-update turn is
        i modulo n (read when the step runs, so a replayed graph takes turns too);
        in_place_ok: a single tensor may be summed in its own bytes (a gradient may not:
        backward can still be reading it, e.g. Add hands one tensor to both its inputs)."""
        dev = grads[0].device
        comm, kernels, token = self.communicator, dev.kernels, self.token(dev)
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
            pending["skip"] = turn is not None and self.turn % turn[1] != turn[0]
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
                self.left[key] = left
            flat = buf_.reshape(-1)
            staged = pending.pop("staged")
            if staged is not None:
                dev.queue_copy(flat, staged, dev.compute_stream, f"{what}: back from the host")
            if scale:
                kernels.scale(flat, 1.0 / comm.world_size)
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
        """Run on the communication stream: the exchange itself, on host values (the residual
        read there, after the commit of the step before)."""
        return wire.all_reduce(self.communicator, values, self.residuals.get(key))

    def _to_host(self, flat, key, dev, what):
        """(staging array or None, host values): the values the collective reads and writes.
        Host memory already (the CPU device): the tensor's own bytes. Else a pinned host
        array, filled once the kernels queued before have written the gradients."""
        if isinstance(flat, np.ndarray):
            return None, flat
        staging_key = (key, flat.size, np.dtype(flat.dtype))
        if staging_key not in self.staging:
            self.staging[staging_key] = dev.pinned_array((flat.size,), flat.dtype)
        staged = self.staging[staging_key]
        dev.queue_copy(staged, flat, dev.compute_stream, f"{what}: to the host")
        dev.compute_stream.synchronize()
        return staged, staged

    def commit_residuals(self, dev):
        """In the commit: the residuals the step's sparse exchanges left become the ones the
        next step adds (a failed step leaves the old ones)."""
        token = self.token(dev)

        def commit(_token_out, _token_in):
            self.residuals.update(self.left)
            self.left.clear()

        dev.exec(commit, reads=(token,), writes=(token,), name="DistOpt:residuals", phase="update")

    def next_turn(self, dev):
        """In the commit: the next partition's turn (a device operation: replays take it)."""
        token = self.token(dev)

        def advance(_token_out, _token_in):
            self.turn += 1

        dev.exec(advance, reads=(token,), writes=(token,), name="DistOpt:turn", phase="update")

    def token(self, dev):
        """The device's collective counter, made on first use."""
        if dev not in self.tokens:  # a host write: persistent state, never part of a recording
            self.tokens[dev] = Tensor(
                (1,), dev, np.int32, requires_grad=False, name="DistOpt collective counter"
            ).set_value(0)
        return self.tokens[dev]


def _names(tensors):
    return f"{len(tensors)} tensor(s), {sum(t.size() for t in tensors)} elements"
