"""Devices: each owns one preallocated memory pool and runs, or records, operations.

SINGA's contract, kept here: every operation hands the device a function together with what
it reads and what it writes, ``dev.exec(fn, reads, writes)``. Knowing the blocks is what lets
the device allocate lazily (a written block gets its bytes just before its first writer runs)
and, in graph mode, order, recycle and plan the memory of a recorded training step.

The function receives NumPy views of the tensors' bytes, outputs first:
``fn(*write_arrays, *read_arrays)``; it never sees a Tensor, so a recorded graph keeps no
Python reference alive.
"""

import contextlib
import itertools
import os
import threading
import time
from collections import defaultdict

import numpy as np

from nnmem.interrupts import deferred_interrupts
from nnmem.memory.arena import SharedArena
from nnmem.memory.block import Block
from nnmem.memory.pool import Pool
from nnmem.memory.units import format_bytes, parse_bytes

DEFAULT_POOL_BYTES = "2GiB"
_numbers = itertools.count()  # every device of the process gets its own number (repr, reports)


class DeviceUnavailable(RuntimeError):
    """The requested kind of device cannot be created on this machine."""


class Device:
    """A device: a memory pool, a random generator, ``exec``, and the switches a learner flips.

    dry_run   -- run no kernel and allocate nothing (Model.compile's shape-only pass).
    virtual   -- a planning device: its pool hands out offsets with no bytes behind them, no
                 kernel ever runs, and host writes only allocate. A step recorded on it is
                 planned exactly as on a real device, on shapes alone (see nnmem.planning).
    recycle   -- free a block as soon as nothing refers to it (default). Off: keep every block
                 of a training step until the step ends, failed or not (SuperNeurons'
                 network-wide allocation, the baseline every memory technique is measured
                 against); outside a step, blocks are freed at once.
    recorder  -- while a Model records its step, exec calls are appended to it, not run.
    memory_samples -- when a list, every kernel run appends (name, allocated bytes, live
                 blocks): the raw data of a measured Timeline (nnmem.measure).
    """

    lang = "cpp"

    def __init__(self, pool_bytes=None, strategy="best_fit", name="cpu", dev_id=-1, virtual=False):
        if pool_bytes is None:
            pool_bytes = os.environ.get("NNMEM_POOL_BYTES", DEFAULT_POOL_BYTES)
        self.virtual = virtual
        self.pool = Pool(parse_bytes(pool_bytes), strategy=strategy, virtual=virtual)
        self.graph_arena = SharedArena(self.pool)  # where compiled steps plan intermediates
        self.name = name
        self.number = next(_numbers)
        self.dev_id = dev_id
        self.rng = np.random.default_rng()
        self.dry_run = False
        self.recycle = True
        self._deferred = []  # blocks whose frees wait for the end of the step (recycle off)
        # One step at a time: a step (and every exec) holds this lock, so two threads that
        # share the device take turns instead of interleaving in its pool, graph arena,
        # recorder and dry-run switch. Reentrant: a step's own execs take it again.
        self.lock = threading.RLock()
        self._steps_running = 0
        self.commits = 0  # commit phases begun (a step that began one cannot be rolled back)
        self.recorder = None
        self.memory_samples = None
        self.verbosity, self.skip_iterations, self.iteration = 0, 0, 0
        self.profile = defaultdict(lambda: [0.0, 0])  # name -> [seconds, calls]
        # dropout's draw counter, a 1-element tensor every random draw reads and writes, so
        # that a recorded graph keeps the draws in order (nnmem.ops.dropout makes it)
        self.rng_state = None

    # -- memory ---------------------------------------------------------------------------
    def new_block(self, nbytes, desc=""):
        """A lazily allocated block of `nbytes` in this device's pool."""
        return Block(self, nbytes, desc)

    def on_unreferenced(self, block):
        """The last reference to `block` is gone: free it now, or (recycling off, inside a
        step) when the step ends."""
        if self.recycle or not self._steps_running:
            block.release()
        else:
            self._deferred.append(block)

    @contextlib.contextmanager
    def step(self):
        """One model step: holds the device's lock and, however the step ends, releases the
        blocks deferred by recycling off; a step that returns counts as an iteration."""
        with self.lock:
            self._steps_running += 1
            try:
                yield
            finally:
                self._steps_running -= 1
                if not self._steps_running:
                    with deferred_interrupts():  # a Ctrl-C here would leak the rest
                        self._release_deferred()
            self.iteration += 1

    @contextlib.contextmanager
    def commit_phase(self):
        """The step's commit: its parameter updates. Once it has begun, the step counts as done
        (a later failure no longer rolls its buffers back: see Model.__call__), and a Ctrl-C
        waits for the phase's end. While a step is recorded nothing runs: nothing commits."""
        with deferred_interrupts():  # first: a Ctrl-C now must not find half a commit
            if self.recorder is None and not self.dry_run:
                self.commits += 1
            yield

    def _release_deferred(self):
        deferred, self._deferred = self._deferred, []
        for block in deferred:
            if block.ref_count == 0:
                block.release()

    def memory_stats(self):
        """The pool's statistics (names as in torch.cuda.memory_stats)."""
        return self.pool.stats()

    def reset_peak_memory_stats(self):
        self.pool.reset_peak()

    # -- execution ------------------------------------------------------------------------
    def exec(self, fn, reads, writes, name="", inplace=(), phase="forward", rebuild=None):
        """Run ``fn(*write_arrays, *read_arrays)``; `reads` and `writes` are tensors.

        Written blocks are allocated here, just before their first writer (lazy allocation);
        a read of a block nobody wrote raises instead of returning garbage. While a model
        records its step the call is only buffered (SINGA): nothing runs, nothing is allocated.
        `phase` ("forward", "backward", "update") and `rebuild` (see Operator.run) are kept
        in the recording for the recomputation pass.
        """
        with self.lock:
            if self.dry_run:
                return
            if self.recorder is not None:
                self.recorder.record(fn, reads, writes, name, inplace, phase, rebuild)
                return
            for t in reads:
                t.block.check_written()
            for t in writes:
                t.block.ensure_allocated()
            if not self.virtual:
                self.run_kernel(name, fn, [t.raw for t in writes] + [t.raw for t in reads])

    def run_kernel(self, name, fn, arrays):
        """Call the kernel function, timing it when profiling is on (eager and replay alike)."""
        if self.verbosity and self.iteration >= self.skip_iterations:
            start = time.perf_counter()
            fn(*arrays)
            entry = self.profile[name]
            entry[0] += time.perf_counter() - start
            entry[1] += 1
        else:
            fn(*arrays)
        if self.memory_samples is not None:
            stats = self.pool.stats()
            self.memory_samples.append(
                (name, stats["allocated_bytes.current"], stats["active_blocks"])
            )

    # -- SINGA's device methods -------------------------------------------------------------
    def SetRandSeed(self, seed):
        """Seed the generator that initialises parameters and draws dropout masks.

        The generator is reseeded in place: recorded kernels that draw from it (dropout in a
        compiled graph) hold this object, and must see the new seed as eager code does."""
        self.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state

    def Sync(self):
        """Wait for queued work; the CPU device runs everything at once, so nothing waits."""

    def SetVerbosity(self, verbosity):
        """Per-operation timing: 0 off, 1 per operation type, 2 per operation (layer:op)."""
        self.verbosity = int(verbosity)

    def SetSkipIteration(self, iterations):
        """Leave the first `iterations` steps (JIT compilation, recording) out of the profile."""
        self.skip_iterations = int(iterations)

    def PrintTimeProfiling(self):
        """Print where the time of the profiled steps went, most expensive first."""
        print(self.time_profile_table())

    def time_profile_table(self):
        rows = defaultdict(lambda: [0.0, 0])
        for name, (seconds, calls) in self.profile.items():
            key = name.split(":")[-1] if self.verbosity == 1 else name
            rows[key][0] += seconds
            rows[key][1] += calls
        total = sum(seconds for seconds, _ in rows.values()) or 1.0
        steps = max(self.iteration - self.skip_iterations, 1)
        lines = [
            f"time profile over {steps} step(s), per step:",
            f"{'operation':40} {'ms/step':>9} {'calls/step':>10} {'share':>6}",
        ]
        for key, (seconds, calls) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
            lines.append(
                f"{key[:40]:40} {1e3 * seconds / steps:9.3f} {calls / steps:10.1f} "
                f"{seconds / total:6.1%}"
            )
        return "\n".join(lines)

    def id(self):
        return self.dev_id

    def __repr__(self):
        return f"<Device {self.name}:{self.number} pool={format_bytes(self.pool.capacity)}>"


_default_device = None


def create_cpu_device(pool_bytes=None, strategy="best_fit"):
    """A CPU device whose pool preallocates `pool_bytes` (int or "2GiB"; default 2 GiB, or
    the environment variable NNMEM_POOL_BYTES). `strategy` is "best_fit" or "first_fit"."""
    return Device(pool_bytes, strategy=strategy)


def create_planning_device(pool_bytes=2**50, strategy="best_fit"):
    """A virtual device for planning memory on shapes alone: nothing runs, no byte is used,
    and its pool's statistics are what a real pool would show (default: 1 PiB, no limit)."""
    return Device(pool_bytes, strategy=strategy, name="planning", virtual=True)


def get_default_device():
    """The process-wide default CPU device (created on first use)."""
    global _default_device
    if _default_device is None:
        _default_device = create_cpu_device()
    return _default_device


def create_cuda_gpu(*args, **kwargs):
    """CUDA devices come in a later version of nnmem."""
    raise DeviceUnavailable(
        "create_cuda_gpu(): this version of nnmem has no CUDA device yet; "
        "use device.create_cpu_device() (the same model code runs on it unchanged)"
    )


def create_cuda_gpu_on(*args, **kwargs):
    return create_cuda_gpu()
