"""Communicator: the MPI side of data-parallel training, SINGA's ``singa.Communicator`` over
mpi4py (SINGA's runs NCCL on the GPU; MPI runs on any machine, the `mpich` wheel included).

Every MPI call of nnmem runs on one thread of its own, the *communication stream*: a FIFO, so
the collectives leave each rank in the order the step issued them (MPI requires every rank to
call the collectives of a communicator in one order), and, because mpi4py releases the GIL
inside MPI, an all-reduce runs while the main thread goes on with backward. The main thread
gets a Handle for each call and waits for it where it needs the result.

No wait is unbounded. A rank that raised, returned early or hangs never joins the collective
the others are in; after ``timeout`` seconds they raise DistributedError, naming the
collective, and the communicator is broken: every later call raises at once, and at exit the
job is aborted (MPI_Abort) rather than left to hang in MPI_Finalize, which waits for the
collective that can never end. (A rank that is killed or crashes is seen sooner: mpiexec
stops the whole job.)

What goes on the wire (SINGA's three ways; ``wire_bytes`` counts this rank's payload):

* ``allreduce``: the float32 (or float64) values, summed in place;
* ``allreduce_half``: the values rounded to float16, summed in float16 by MPI, widened again
  (SINGA's synchHalf): half the bytes;
* ``sparse_allreduce``: only the chosen elements, as (int32 index, float32 value) pairs,
  gathered from every rank and summed into zeros (SINGA's sparsification): the largest
  ceil(spars * n) in magnitude (top-K) or those with |v| >= spars; with a residual r (SINGA's
  gradient accumulation, Aji & Heafield's error feedback) the candidates are v + r and the
  new residual is what was not sent.
"""

import atexit
import hashlib
import math
import os
import queue
import sys
import threading

import numpy as np

#: seconds a rank waits for the others in one collective before it gives up (DistOpt's default)
DEFAULT_TIMEOUT_S = 300.0

#: environment variables a launcher sets to the number of processes it started: MPICH's and
#: Intel MPI's hydra (PMI_SIZE), Open MPI (OMPI_COMM_WORLD_SIZE), Slurm's srun (SLURM_NTASKS
#: only with a PMI rank beside it)
_WORLD_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")


class DistributedError(RuntimeError):
    """A collective did not complete: another rank died, stopped early or is stuck, or the
    ranks disagree (different models)."""


def launched_with_mpi():
    """The number of processes mpiexec started this one among, or 1 when it was not started by
    a launcher (read from the environment, without importing MPI)."""
    for name in _WORLD_SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 1


def import_mpi():
    """mpi4py's MPI module, or an ImportError that says how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(
            "data-parallel training needs mpi4py and an MPI library: pip install "
            "'nnmem[mpi]' (mpi4py and the mpich wheel; no system MPI needed), then launch "
            f"with: mpiexec -n 2 python train.py ({e})"
        ) from None
    return MPI


class Handle:
    """A call queued on the communication stream; ``result()`` waits for it (bounded)."""

    def __init__(self, communicator, what):
        self._communicator, self.what = communicator, what
        self._done = threading.Event()
        self._value = self._error = None

    def result(self):
        """The call's return value; its exception; or DistributedError after the timeout."""
        timeout = self._communicator.timeout
        if not self._done.wait(timeout):
            self._communicator.fail(
                f"rank {self._communicator.global_rank}: {self.what} did not complete within "
                f"{timeout:g} s: another rank died, stopped before it, or is stuck (check the "
                "other ranks' output; DistOpt(timeout=...) or nnmem train --dist-timeout sets "
                "the limit); the job will be aborted at exit"
            )
        if self._error is not None:
            raise self._error
        return self._value


class Communicator:
    """The processes of one MPI communicator (COMM_WORLD by default, duplicated so that nnmem's
    collectives never mix with the program's own), each a rank.

    global_rank: this process among all; local_rank: among those on the same node (which
    GPU it would take); world_size: how many. timeout: seconds to wait for one collective."""

    def __init__(self, timeout=DEFAULT_TIMEOUT_S, comm=None):
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(
                f"Communicator(timeout={timeout!r}): give a positive number of seconds"
            )
        self.MPI = MPI = import_mpi()
        parent = comm or MPI.COMM_WORLD
        self.world_size, self.global_rank = parent.Get_size(), parent.Get_rank()  # local calls
        self.timeout = float(timeout)
        self.wire_bytes = 0  # payload bytes this rank has sent, all collectives together
        self.calls = 0  # calls queued on the communication stream
        self._broken = None
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._drain, name=f"nnmem MPI rank {self.global_rank}", daemon=True
        )
        self._thread.start()
        # Registered after mpi4py's own exit handler (MPI_Finalize), so it runs before it.
        atexit.register(self._abort_if_broken)
        # Collectives too, so bounded: a rank that failed before it made its DistOpt never
        # joins them.
        self.comm = self.call("duplication of the communicator", parent.Dup)
        # An MPI error (a message of another size than the peers': the ranks' models or
        # settings differ) raises MPI.Exception in Python, rather than killing the job.
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        node = self.call("ranks per node", self.comm.Split_type, MPI.COMM_TYPE_SHARED)
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        node.Free()

    # -- the communication stream ---------------------------------------------------------
    def submit(self, what, fn, *args):
        """Queue ``fn(*args)`` on the communication stream; a Handle to wait for it."""
        if self._broken is not None:
            raise DistributedError(f"the communicator failed earlier: {self._broken}")
        self.calls += 1
        handle = Handle(self, f"call #{self.calls} ({what})")
        self._queue.put((handle, fn, args))
        return handle

    def call(self, what, fn, *args):
        """Run ``fn(*args)`` on the communication stream and wait for it (bounded)."""
        return self.submit(what, fn, *args).result()

    def quiesce(self):
        """Wait (bounded) until every queued call has ended; their own failures are not
        raised (they belonged to a step that failed already). A broken communicator has
        nothing to wait for: its stuck collective writes nothing, and the job ends at exit."""
        if self._broken is not None:
            return
        handle = self.submit("end of the calls queued before", lambda: None)
        handle.result()

    def break_off(self, reason):
        """Break the communicator: every later call raises, and the job is aborted at exit
        (the ranks' collectives no longer match)."""
        self._broken = self._broken or reason

    def fail(self, message):
        """Break the communicator and raise DistributedError."""
        self.break_off(message)
        raise DistributedError(message)

    def _drain(self):
        while True:
            handle, fn, args = self._queue.get()
            try:
                handle._value = fn(*args)
            except BaseException as e:  # handed to the waiter, which raises it
                handle._error = e
            handle._done.set()

    def _abort_if_broken(self):
        if self._broken is not None:
            sys.stderr.write(f"nnmem: aborting the MPI job: {self._broken}\n")
            sys.stderr.flush()
            self.MPI.COMM_WORLD.Abort(1)

    # -- collectives (run on the communication stream) ---------------------------------
    def allreduce(self, values):
        """values = the sum of every rank's values (a contiguous host array), in place."""
        self.wire_bytes += values.nbytes
        self.comm.Allreduce(self.MPI.IN_PLACE, values, op=self.MPI.SUM)

    def allreduce_half(self, values):
        """values (float32) = the sum of every rank's values rounded to float16, summed in
        float16: what SINGA's synchHalf sends, half the bytes of allreduce."""
        half = values.astype(np.float16)
        self.wire_bytes += half.nbytes
        self.comm.Allreduce(self.MPI.IN_PLACE, [half, self.MPI.FLOAT16_T], op=self.MPI.SUM)
        values[...] = half

    def sparse_allreduce(self, values, residual, spars, top_k):
        """values (float32) = the sum over ranks of each rank's chosen elements of
        c = values + residual (residual None: c = values); the rest of c is returned (the
        residual the next step adds), or None without a residual. Chosen: the ceil(spars * n)
        largest |c| (top_k), else every |c| >= spars; a NaN or infinite c always. Every rank
        sums the gathered pairs in rank order, so all get the same bits."""
        candidates = values if residual is None else values + residual
        # NaN and infinities are always sent: kept back, they would sit in the residual for
        # ever, and the parameters would never show that training diverged.
        magnitude = np.where(np.isfinite(candidates), np.abs(candidates), np.inf)
        if top_k:
            k = min(max(math.ceil(spars * candidates.size), 1), candidates.size)
            chosen = np.sort(np.argpartition(-magnitude, k - 1)[:k]).astype(np.int32)
        else:
            chosen = np.flatnonzero(magnitude >= spars).astype(np.int32)
        sent = candidates[chosen].astype(np.float32)
        left = None
        if residual is not None:
            left = candidates.copy()
            left[chosen] = 0
        counts = np.array(self.comm.allgather(chosen.size), np.int64)
        self.wire_bytes += chosen.nbytes + sent.nbytes + 8
        indices = np.empty(int(counts.sum()), np.int32)
        gathered = np.empty(int(counts.sum()), np.float32)
        self.comm.Allgatherv(chosen, [indices, counts])
        self.comm.Allgatherv(sent, [gathered, counts])
        values[...] = 0
        np.add.at(values, indices, gathered.astype(values.dtype))
        return left

    def broadcast(self, values, root=0):
        """values = root's values (a contiguous host array), in place."""
        self.comm.Bcast(values, root=root)  # once, before training: not in wire_bytes

    def check_same(self, what, entries):
        """Raise DistributedError on every rank unless every rank gives the same `entries`
        (a list of tuples of text and numbers): a digest is compared first, and where they
        differ, the first difference is named. Nothing else is exchanged, so nothing hangs."""
        digest = hashlib.sha256(repr(list(entries)).encode()).hexdigest()
        digests = self.call(f"check of {what}", self.comm.allgather, digest)
        if len(set(digests)) == 1:
            return
        everyone = self.call(f"listing of {what}", self.comm.allgather, list(entries))
        mine = everyone[self.global_rank]
        other = next(r for r, d in enumerate(digests) if d != digests[self.global_rank])
        theirs = everyone[other]
        first = next(
            (i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs))
        )
        raise DistributedError(
            f"rank {self.global_rank}: the ranks' {what} differ (ranks grouped by what they built: "
            f"{_groups(digests)}): entry {first} is {_entry(mine, first)} here and "
            f"{_entry(theirs, first)} on rank {other}; every rank must build the same model"
        )


def _entry(entries, i):
    return repr(entries[i]) if i < len(entries) else "missing (the list ends before it)"


def _groups(digests):
    """Ranks grouped by digest, e.g. '0 | 1' for two ranks that disagree."""
    groups = {}
    for rank, digest in enumerate(digests):
        groups.setdefault(digest, []).append(str(rank))
    return " | ".join(",".join(g) for g in groups.values())
