"""Device: what every kind of device shares, and the seam each kind fills in.

SINGA's contract, kept here: every operation hands the device a function together with what
it reads and what it writes, ``dev.exec(fn, reads, writes)``. Knowing the blocks is what lets
the device allocate lazily (a written block gets its bytes just before its first writer runs)
and, in graph mode, order, recycle and plan the memory of a recorded training step.

The function receives arrays viewing the tensors' bytes, outputs first:
``fn(*write_arrays, *read_arrays)`` -- NumPy arrays on the CPU, numba.cuda device arrays on a
GPU -- and calls kernels it took from ``dev.kernels``; it never sees a Tensor, so a recorded
graph keeps no Python reference alive.

The seam. A kind of device decides four things, and nothing else differs:

* where the bytes are: ``storage`` (memory/storage.py), behind one device-agnostic Pool;
* which kernels run: ``kernels``, a module (or namespace) with the names of nnmem.kernels.cpu;
* how bytes cross between host and device: ``_write_from_host``, ``to_host``, ``copy_tensor``,
  ``queue_copy``; and the host memory offloaded tensors live in (``_make_host_storage``);
* how work is queued: ``compute_stream``, ``copy_stream``, ``create_stream``, ``create_event``.
"""

import contextlib
import itertools
import os

import numpy as np

from nnmem.devices.half import touches_float16, widened
from nnmem.devices.profiler import Profiler, fastest_run
from nnmem.devices.singa_methods import SingaMethods
from nnmem.devices.step_guard import StepGuard
from nnmem.devices.switches import Switches
from nnmem.memory.arena import SharedArena
from nnmem.memory.block import Block
from nnmem.memory.cache import try_alloc
from nnmem.memory.errors import TransferError
from nnmem.memory.host import HostMemory
from nnmem.memory.pool import ALIGNMENT, Pool
from nnmem.memory.storage import HostStorage
from nnmem.memory.units import format_bytes, parse_bytes

_numbers = itertools.count()  # every device of the process gets its own number (repr, reports)


def _fresh_seed():
    """A seed for the counter-based draws from the operating system's entropy, in [0, 2**63):
    kernels receive it as a Python int, which Numba passes as int64."""
    return int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> np.uint64(1))


class Device(Switches, SingaMethods):
    """A device: a memory pool, random numbers, ``exec``, and the switches that change what
    ``exec`` does (``recycle``, ``dry_run``, ``recorder``, ...: switches.py).

    Random numbers: ``rng`` (a NumPy generator on the host) initialises parameters; dropout
    masks are counter-based draws (kernels/counter_rng.py) from ``seed`` and the dropout
    counter ``dropout_counter`` (``make_dropout_counter()``), a 1-element tensor in the pool,
    so a GPU draws them without the host.
    """

    lang = "cpp"
    kind = "abstract"
    runs_kernels = True  # False: a planning device, which only allocates
    kernels = None  # set by each kind: the module of kernels its operations call

    @property
    def plans_for(self):
        """The kind of device whose step this one builds: its own (a planning device: the kind
        it plans for). Operations that size memory by the device read it (Conv2d's "auto")."""
        return self.kind

    def __init__(self, pool_bytes, policy, name, dev_id=-1):
        self.pool = Pool(parse_bytes(pool_bytes), policy=policy, alignment=ALIGNMENT)
        self.storage = self._make_storage(self.pool.capacity, ALIGNMENT)
        # where offloaded tensors wait for backward (memory/host.py): bytes reserved on first use
        self.host = HostMemory(_host_pool_bytes(self), self._make_host_storage, name)
        self.graph_arena = SharedArena(self.pool)  # where compiled steps plan intermediates
        self.offload_stats = {}  # the last offloading step's figures (graph/engine.py)
        self.name = name
        self.number = next(_numbers)
        self.dev_id = dev_id
        self.rng = np.random.default_rng()
        self.seed = _fresh_seed()
        self.dropout_counter = None  # counts dropout's draws: make_dropout_counter() makes it
        # the switches that change what exec does (switches.py)
        self.recycle = True
        self.dry_run = False
        self.recorder = None
        self._paused_recorder = None  # EnableGraph(False) during a recording
        self.workspace_limit = None
        self.cache = None
        self.memory_samples = None
        # one step at a time, the commit phase, and the frees recycling off defers
        self.step_guard = StepGuard()
        self.lock = self.step_guard.lock  # held by every step and exec (step_guard.py)
        self.profiler = Profiler(self.Sync)  # SINGA's SetVerbosity and PrintTimeProfiling

    # -- the seam: what each kind of device provides ----------------------------------------
    def _make_storage(self, capacity, alignment):
        """The object that owns the pool's `capacity` bytes (see memory/storage.py)."""
        raise NotImplementedError

    def _make_host_storage(self, capacity, alignment):
        """The bytes of the host pool (offloaded tensors): ordinary host memory by default."""
        return HostStorage(capacity, alignment)

    def _host_pool_bytes(self):
        """The host pool's size: four device pools' worth (address space only, until used)."""
        return 4 * self.pool.capacity

    def queue_copy(self, dst, src, stream, label):
        """Queue ``dst[...] = src`` (arrays of the same bytes; one on the device, one in host
        memory, either way) on `stream`. A failure is raised by the stream's next
        ``synchronize()``; `label` says which copy it was."""
        raise NotImplementedError

    def _write_from_host(self, tensor, write):
        """Let ``write(array)`` fill a host array of the tensor's shape and dtype, and put it
        into the tensor's (already allocated) bytes."""
        raise NotImplementedError

    def to_host(self, tensor, out=None):
        """A copy of the tensor's bytes in a new NumPy array, or in `out` (a host array of the
        tensor's shape and dtype); waits for the work queued before it. Returns the array."""
        raise NotImplementedError

    def copy_tensor(self, dst, src):
        """dst's bytes = src's bytes (same shape and dtype), queued on the compute stream."""
        raise NotImplementedError

    def create_stream(self):
        """A new queue of work that runs in order, beside the others (see streams.py)."""
        raise NotImplementedError

    def create_event(self):
        """A new event: recorded on a stream, it is set when the work queued before it ends."""
        raise NotImplementedError

    def pinned_array(self, shape, dtype):
        """A host array the copy engine can read and write directly (page-locked on a GPU)."""
        return np.empty(shape, dtype)

    def copy_to_host_async(self, tensor, out, stream):
        """Queue ``out[...] = tensor's bytes`` on `stream`; record an event to know when."""
        raise NotImplementedError

    def copy_from_host_async(self, tensor, host, stream):
        """Queue ``tensor's bytes = host`` on `stream` (the tensor must be allocated)."""
        raise NotImplementedError

    def time_kernel(self, fn, arrays, repeats=3):
        """Seconds one ``fn(*arrays)`` takes, as this device will run it in a step: the fastest
        of `repeats` runs after a first one that may compile (profiler.fastest_run)."""
        return fastest_run(fn, arrays, self.Sync, repeats)

    def snapshot(self, tensors):
        """Host copies of `tensors` (a failed step's undo record), taken in queue order: on a
        GPU they may still be in flight when this returns, so ``Sync()`` before reading them."""
        return [self.to_host(t) for t in tensors]

    def captured_replay(self, step, host_values):
        """The replay of the compiled `step` in few launches, with ``compute()`` and
        ``commit()`` (the CUDA device's CUDA graphs), or None to replay it call by call."""
        return None

    def Sync(self):
        """Wait until every queued kernel and copy of this device has finished."""
        self.compute_stream.synchronize()
        self.copy_stream.synchronize()

    # -- memory ---------------------------------------------------------------------------
    def alloc_block(self, block):
        """The offset of new bytes for `block` in the pool; with the tensor cache on, evicting
        least recently used tensors to the host when the pool (or budget) is full."""
        if self.cache is None:
            return self.pool.alloc(block.nbytes, owner=block)
        offset = try_alloc(self.pool, block)
        if offset is None:
            offset = self.cache.allocate(block)
        if self.step_guard.running:
            self.cache.born.add(id(block))  # made by this step: an activation, maybe
        return offset

    def keep_for_backward(self, operator_name, tensors):
        """An operator saved `tensors` for its backward (Operator.save): with eager offloading
        on, they become candidates for eviction to the host (memory/cache.py)."""
        if self.cache is not None and self.recorder is None and not self.dry_run:
            self.cache.consider(operator_name, [t.block for t in tensors])

    def raise_copy_failure(self, label):
        """Raise a failed copy of the copy stream now, as a TransferError naming `label` (what
        was waited for), before a kernel reads the garbage it left. The CPU's copy stream keeps
        its failure; a GPU's error is raised by its next synchronisation."""
        raise_failure = getattr(self.copy_stream, "raise_failure", None)
        if raise_failure is None:
            return
        try:
            raise_failure()
        except Exception as e:
            raise TransferError(f"{label} failed: {e}") from e

    def new_block(self, nbytes, desc=""):
        """A lazily allocated block of `nbytes` in this device's pool."""
        return Block(self, nbytes, desc)

    def view(self, offset, nbytes, within=None):
        """A uint8 array (no copy) of bytes [offset, offset + nbytes) of the live block at
        `offset` (or inside the live block at `within`: see Pool.check_range)."""
        self.pool.check_range(offset, nbytes, within)
        return self.storage.view(offset, nbytes)

    def write_from_host(self, tensor, write):
        """Allocate the tensor (lazily), then fill it from the host with ``write(array)``.

        Holds the device's lock: a write waits for a step another thread is running, and two
        threads' first writes to one tensor allocate it once."""
        with self.lock:
            tensor.block.ensure_allocated()
            self._write_from_host(tensor, write)
        return tensor

    def on_unreferenced(self, block):
        """The last reference to `block` is gone: free it now, or (recycling off, inside a
        step) when the step ends."""
        if self.recycle or not self.step_guard.running:
            block.release()
        else:
            self.step_guard.defer(block)

    @contextlib.contextmanager
    def step(self):
        """One model step: holds the device's lock and, however the step ends, releases the
        blocks deferred by recycling off; a step that returns counts as an iteration
        (step_guard.py)."""
        with self.step_guard.step():
            self.fit_arenas()  # the steps the garbage collector took since the last one
            if self.cache is not None and self.step_guard.running == 1:
                self.cache.new_iteration()
            with self.profiler.profiling_step(self.iteration):
                yield

    def fit_arenas(self):
        """Shrink the graph arenas (the device's and the host pool's) to the plans of the
        compiled steps still using them, unless another step runs (an arena may move): at the
        start of a step, and when a step is dropped whose first run failed."""
        if self.step_guard.running <= 1:
            self.graph_arena.fit()
            self.host.graph_arena.fit()

    def commit_phase(self):
        """The step's commit (a context manager): its parameter updates. Once it has begun, the
        step counts as done (a later failure no longer rolls its buffers back: see
        Model.__call__), and a Ctrl-C waits for the phase's end. While a step is recorded
        nothing runs: nothing commits."""
        return self.step_guard.commit_phase(counts=self.recorder is None and not self.dry_run)

    @property
    def commits(self):
        """Commit phases begun on this device: a step whose count moved cannot be undone."""
        return self.step_guard.commits

    @property
    def iteration(self):
        """Steps that returned on this device."""
        return self.step_guard.iteration

    def memory_stats(self):
        """The pool's statistics (names as in torch.cuda.memory_stats), the host pool's as
        ``host.*``, the last offloading step's transfers as ``offload.*`` (graph/engine.py),
        and the eager tensor cache's counters of this iteration as ``cache.*``."""
        cache = {} if self.cache is None else self.cache.stats()
        return {**self.pool.stats(), **self.host.stats(), **self.offload_stats, **cache}

    def reset_peak_memory_stats(self):
        self.pool.reset_peak()

    def set_offload_stats(self, stats):
        """The figures of the last offloading step's transfers (``offload.*``: TransferEngine.
        measure()), which memory_stats() reports until the next such step replaces them."""
        self.offload_stats = stats

    # -- random numbers -----------------------------------------------------------------
    def make_dropout_counter(self, make_tensor):
        """The dropout counter ``dropout_counter`` (ops/dropout.py): a 1-element int64 tensor
        that every random draw reads and increments. Made on the first call, holding 0, by
        ``make_tensor(shape, device, dtype, requires_grad=, name=)``: the Tensor class, which
        is a layer above the device. SetRandSeed sets it back to 0."""
        with self.lock:
            if self.dropout_counter is None:
                self.dropout_counter = make_tensor(
                    (1,), self, np.int64, requires_grad=False, name="dropout_counter"
                )
                self.dropout_counter.set_value(0)
            return self.dropout_counter

    def SetRandSeed(self, seed):
        """SINGA's: seed the generator that initialises parameters and the draws of dropout
        masks.

        The generator is reseeded in place (recorded code holds this object), and the dropout
        counter goes back to 0, so the masks after a reseed are the same every time."""
        self.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        self.seed = int(seed) % 2**63  # Numba passes a Python int as int64
        if self.dropout_counter is not None and self.dropout_counter.block.allocated:
            self.dropout_counter.set_value(0)

    # -- execution ------------------------------------------------------------------------
    def exec(self, fn, reads, writes, name="", inplace=(), phase="forward", rebuild=None, tag=None):
        """Run ``fn(*write_arrays, *read_arrays)``; `reads` and `writes` are tensors.

        Written blocks are allocated here, just before their first writer (lazy allocation);
        a read of a block nobody wrote raises instead of returning garbage. While a model
        records its step the call is only buffered (SINGA): nothing runs, nothing is allocated.
        `phase` ("forward", "backward", "update"), `rebuild` and `tag` (see Operator.run) are
        kept in the recording for the recomputation and fusion passes.
        """
        if touches_float16(tuple(reads) + tuple(writes)):
            fn = self.half_precision(fn, len(writes))
            if isinstance(rebuild, tuple):  # recomputation's recipe runs kernels on them too
                again, again_reads, again_writes = rebuild
                rebuild = (self.half_precision(again, len(again_writes)), again_reads, again_writes)
        with self.lock:
            if self.dry_run:
                return
            if self.recorder is not None:
                self.recorder.record(fn, reads, writes, name, inplace, phase, rebuild, tag)
                return
            if self.cache is not None:
                self._exec_cached(fn, reads, writes, name)
                return
            for t in reads:
                t.block.check_written()
            for t in writes:
                t.block.ensure_allocated()
            if self.runs_kernels:
                self.run_kernel(name, fn, [t.raw for t in writes] + [t.raw for t in reads])

    def _exec_cached(self, fn, reads, writes, name):
        """exec with the tensor cache on: the operation's tensors are locked (never evicted
        while it runs), evicted ones are fetched back, and every access counts for the LRU."""
        blocks = [t.block for t in tuple(reads) + tuple(writes)]
        self.cache.lock(blocks)
        try:
            for t in reads:
                t.block.check_written()
            for t in tuple(writes) + tuple(reads):
                t.block.ensure_allocated()  # allocates, or fetches an evicted tensor
                self.cache.touch(t.block)
            if self.runs_kernels:
                self.run_kernel(name, fn, [t.raw for t in writes] + [t.raw for t in reads])
        finally:
            self.cache.unlock(blocks)

    def half_precision(self, fn, n_writes):
        """The kernel function to run for a call that reads or writes float16 tensors: here
        (the CPU), fn on float32 copies, rounded back into the written tensors (devices/half.py).
        A device whose kernels cannot do that overrides it and refuses."""
        return widened(fn, n_writes)

    def run_kernel(self, name, fn, arrays):
        """Call the kernel function, timed by the profiler when it is on (eager and replay
        alike), and a memory sample taken after it while ``sampling_memory()``."""
        if self.profiler.is_timing(self.iteration):
            self.profiler.run(name, fn, arrays)
        else:
            fn(*arrays)
        if self.memory_samples is not None:
            stats = self.pool.stats()
            self.memory_samples.append(
                (name, stats["allocated_bytes.current"], stats["active_blocks"])
            )

    def __repr__(self):
        return f"<Device {self.name}:{self.number} pool={format_bytes(self.pool.capacity)}>"


def _host_pool_bytes(device):
    """The host pool's size: NNMEM_HOST_POOL_BYTES when set (a GPU's host pool is pinned memory,
    all of it reserved at the first offload: a smaller one pins less, sooner), else the
    device's own choice."""
    value = os.environ.get("NNMEM_HOST_POOL_BYTES")
    if not value:
        return device._host_pool_bytes()
    try:
        return parse_bytes(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"the environment variable NNMEM_HOST_POOL_BYTES: {e}") from None
