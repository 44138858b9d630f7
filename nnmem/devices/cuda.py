"""The CUDA device: the pool is one device array on a GPU; kernels are nnmem.kernels.cuda.

Why one array? cudaMalloc and cudaFree synchronise the whole GPU and take tens of microseconds
to milliseconds: a framework that called them per tensor would stall every step. So, like
SuperNeurons' heap pool, PyTorch's caching allocator and SINGA's CnMem, the device asks the
driver for its memory once and the pool (memory/pool.py, the same allocator as on the CPU)
hands out offsets in it; a tensor is a view of its bytes, never CUDA managed memory.

Work is queued, not run: an operation's function launches kernels on the *compute stream* and
returns at once; nothing on the host waits for the GPU inside a step. Host copies (a tensor's
values, an input batch) wait for the compute stream, because they must see what was queued
before them. A second *copy stream* is for the offload engine (copies beside compute), and
page-locked ("pinned") host buffers are what lets the GPU's copy engine read and write host
memory without the CPU (pageable memory is first copied into a pinned buffer by the driver).

This module imports numba.cuda, which needs the numba-cuda package (``pip install
"nnmem[cuda]"``); nnmem.device imports it only when a CUDA device is created.
"""

import contextlib
import functools
import inspect
import math
import os
import time
import types
import warnings
import weakref

import numpy as np
from numba import config, cuda

from nnmem.kernels import cuda as cuda_kernels
from nnmem.memory.errors import TransferError
from nnmem.memory.units import parse_bytes

from . import cuda_graph
from .base import Device

#: Bytes left to the CUDA context, the kernels' modules and cuBLAS-free libraries when the pool
#: takes "most of the free memory": a context alone takes about 300-500 MiB.
CONTEXT_RESERVE = 1 << 30
#: Pool size on the CUDA simulator (NUMBA_ENABLE_CUDASIM=1), which has no memory figures.
SIMULATOR_POOL_BYTES = "256MiB"


def driver_memory_info():
    """(free bytes, total bytes) of the current GPU as the driver reports them; (inf, inf) on
    the simulator."""
    free, total = cuda.current_context().get_memory_info()
    return free, total


def default_pool_bytes():
    """Most of the free memory: all but CONTEXT_RESERVE, in whole MiB."""
    free, _ = driver_memory_info()
    if not math.isfinite(free):
        return parse_bytes(SIMULATOR_POOL_BYTES)
    return max((int(free) - CONTEXT_RESERVE) // (1 << 20), 1) << 20


class CudaStorage:
    """`capacity` bytes of GPU memory: one device array, aligned to `alignment`."""

    def __init__(self, capacity, alignment):
        raw = cuda.device_array(capacity + alignment, dtype=np.uint8)
        address = getattr(raw, "device_ctypes_pointer", None)
        address = address.value if address is not None and address.value else 0
        skip = -address % alignment  # cudaMalloc returns 256-aligned memory: skip is 0 there
        self.buffer = raw[skip : skip + capacity]
        self.address = address + skip
        self.capacity = capacity

    def view(self, offset, nbytes):
        return self.buffer[offset : offset + nbytes]


class PinnedStorage:
    """`capacity` bytes of page-locked host memory (the host pool of offloaded tensors): the
    GPU's copy engine reads and writes it directly, beside the kernels."""

    def __init__(self, capacity, alignment):
        raw = cuda.pinned_array(capacity + alignment, dtype=np.uint8)
        skip = -raw.ctypes.data % alignment
        self.buffer = raw[skip : skip + capacity]
        self.address = raw.ctypes.data + skip
        self.capacity = capacity

    def view(self, offset, nbytes):
        return self.buffer[offset : offset + nbytes]


#: The tables the kernel packages export beside their kernels (function codes, the index maps'
#: rank), which operators read through ``device.kernels`` as well.
KERNEL_TABLES = ("BINARY_CODES", "MAX_DIMS", "UNARY_CODES")


def bind_stream(module, stream):
    """The kernels of `module` with ``stream=stream`` filled in: a namespace with the names of
    nnmem.kernels.cpu, so an operation calls ``K.relu_forward(y, x)`` on either device."""
    bound = types.SimpleNamespace(**{name: getattr(module, name) for name in KERNEL_TABLES})
    for name in module.__all__:
        kernel = getattr(module, name)
        takes_stream = "stream" in inspect.signature(kernel).parameters
        setattr(bound, name, functools.partial(kernel, stream=stream) if takes_stream else kernel)
    return bound


class CudaDevice(Device):
    kind = "cuda"

    def __init__(self, pool_bytes=None, policy="best_fit", dev_id=0):
        cuda.select_device(dev_id)
        if pool_bytes is None:
            pool_bytes = default_pool_bytes()
        super().__init__(pool_bytes, policy, f"cuda:{dev_id}", dev_id)
        self.compute_stream = cuda.stream()
        self.copy_stream = cuda.stream()
        self.kernels = bind_stream(cuda_kernels, self.compute_stream)
        # Replay compiled steps as CUDA graphs (cuda_graph.py); the simulator has none.
        self.use_cuda_graphs = not config.ENABLE_CUDASIM
        self._captured = weakref.WeakKeyDictionary()  # CompiledStep -> CapturedStep or None
        self._snapshots = weakref.WeakKeyDictionary()  # Tensor -> its pinned undo buffer

    def _make_storage(self, capacity, alignment):
        return CudaStorage(capacity, alignment)

    # -- the GPU's context ------------------------------------------------------------------
    # numba.cuda launches in the calling *thread's* current context. A device on GPU 1, or one
    # used from a thread other than the one that made it, must make its GPU current first.
    @contextlib.contextmanager
    def step(self):
        with cuda.gpus[self.dev_id], super().step():
            yield

    def exec(self, *args, **kwargs):
        with cuda.gpus[self.dev_id]:
            return super().exec(*args, **kwargs)

    def write_from_host(self, tensor, write):
        with cuda.gpus[self.dev_id]:
            return super().write_from_host(tensor, write)

    def Sync(self):
        with cuda.gpus[self.dev_id]:
            super().Sync()

    def snapshot(self, tensors):
        """Queued copies into pinned buffers kept per tensor: no host synchronisation between
        steps (the undo record is read only after a failure, after Sync)."""
        copies = []
        for t in tensors:
            host = self._snapshots.get(t)
            if host is None or host.shape != t.shape or host.dtype != t.dtype:
                host = self._snapshots[t] = self.pinned_array(t.shape, t.dtype)
            self.copy_to_host_async(t, host, self.compute_stream)
            copies.append(host)
        return copies

    def time_kernel(self, fn, arrays, repeats=5):
        """GPU seconds of one ``fn(*arrays)``. Replayed steps launch as CUDA graphs, where the
        ~150 us of Python per kernel launch is gone, so timing fn's launches from Python would
        favour the algorithm with the fewest launches, not the fastest: fn is captured as a
        graph (after one plain run, which compiles its kernels) and the graph is timed."""
        if not self.use_cuda_graphs:
            return super().time_kernel(fn, arrays)
        fn(*arrays)
        captured = cuda_graph.CapturedStep([("timed", fn, arrays)], self.compute_stream, None)
        captured.launch()
        self.Sync()
        start = time.perf_counter()
        for _ in range(repeats):
            captured.launch()
        self.Sync()
        return (time.perf_counter() - start) / repeats

    def captured_replay(self, step, host_values):
        """The step as CUDA graphs (cuda_graph.CapturedReplay), captured at its second replay
        (the first compiles the kernels and lets Conv2d's "auto" time its algorithms, neither
        of which may happen while capturing) and again when its arrays or ``host_values()``
        change. Host calls (loss scaling's check, DistOpt's collectives) run between the
        graphs. A step that offloads asynchronously is captured with its copy stream
        (engine.py:CaptureForm). None: replay call by call (graphs off, profiling on, the
        first replay, synchronous offloading: the host waits at every layer's end; traced
        transfers; or a capture that failed: the step then stays uncaptured)."""
        if not self.use_cuda_graphs or self.instrumented or step.replays < 2:
            return None
        engine = step.engine
        if engine is not None and (engine.synchronous or engine.trace):
            return None
        captured = self._captured.get(step, False)
        if captured is None:  # a capture failed before: call by call for good
            return None
        key = host_values()
        if captured is False or captured.source is not step.calls or captured.key != key:
            try:
                captured = self._capture(step, key)
            except Exception as e:
                self._captured[step] = None
                warnings.warn(
                    f"nnmem: {step.label} cannot be captured as a CUDA graph ({e}); it is "
                    "replayed kernel by kernel",
                    RuntimeWarning,
                    stacklevel=4,
                )
                return None
            self._captured[step] = captured
        return captured

    def _capture(self, step, key):
        """The CapturedReplay of the step's calls, or of their capturable form when it
        offloads (``measured``: it reads the events each launch records)."""
        if step.engine is None:
            return cuda_graph.CapturedReplay(
                step.calls, step.split, self.compute_stream, key, step.calls
            )
        form = step.engine.capture_form(cuda_graph.record_node)
        end = functools.partial(self._end_of_transfers, step.label)
        return cuda_graph.CapturedReplay(
            form.calls, form.split, self.compute_stream, key, step.calls, form, end
        )

    def _end_of_transfers(self, label, captured):
        """After an offloading step's compute phase: wait for it (as the uncaptured step
        waits for its copies, before the commit, so a failed transfer changes no parameter)
        and report its transfers in memory_stats() (offload.*). Inside a graph a failed copy
        cannot raise before its reader runs: this synchronisation raises it, or a kernel's
        failure, as a TransferError."""
        try:
            self.compute_stream.synchronize()
        except Exception as e:
            raise TransferError(
                f"{label}: its CUDA graph failed on the GPU (a copy between device and host "
                f"memory, or a kernel): {e}"
            ) from e
        self.set_offload_stats(captured.measured.measure())

    def _write_from_host(self, tensor, write):
        # Pageable memory: pinning a buffer (cudaHostAlloc) costs more than this one
        # synchronous copy saves. Pinned buffers are for the copy engine's asynchronous copies.
        host = np.empty(tensor.shape, tensor.dtype)
        write(host)
        # On the compute stream: after every kernel queued before it, before every one after.
        tensor.raw.copy_to_device(host, stream=self.compute_stream)
        self.compute_stream.synchronize()  # `host` is freed on return: the copy must be done

    def to_host(self, tensor, out=None):
        with self.lock, cuda.gpus[self.dev_id]:
            tensor.block.check_written()
            if out is None:
                out = np.empty(tensor.shape, tensor.dtype)
            tensor.raw.copy_to_host(out, stream=self.compute_stream)
            self.compute_stream.synchronize()
            return out

    def half_precision(self, fn, n_writes):
        """The kernel itself: the CUDA kernels take float16 arrays (storage) and compute in
        float32 (kernels/cuda/_launch.py), with no copy and no temporary."""
        return fn

    def copy_tensor(self, dst, src):
        with cuda.gpus[self.dev_id]:
            dst.raw.copy_to_device(src.raw, stream=self.compute_stream)

    def pinned_array(self, shape, dtype):
        return cuda.pinned_array(shape, dtype)

    def create_stream(self):
        return cuda.stream()

    def create_event(self):
        return cuda.event()

    def _make_host_storage(self, capacity, alignment):
        return PinnedStorage(capacity, alignment)

    def _host_pool_bytes(self):
        """Four device pools, at most half the machine's memory: pinned pages cannot be
        swapped, and the rest of the machine needs some too."""
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return min(4 * self.pool.capacity, physical // 2)

    def queue_copy(self, dst, src, stream, label):
        if hasattr(dst, "copy_to_host"):  # a device array (real or simulated): host -> device
            dst.copy_to_device(src, stream=stream)
        else:
            src.copy_to_host(dst, stream=stream)

    def copy_to_host_async(self, tensor, out, stream):
        tensor.raw.copy_to_host(out, stream=stream)

    def copy_from_host_async(self, tensor, host, stream):
        tensor.raw.copy_to_device(host, stream=stream)

    def memory_stats(self):
        """The pool's statistics, and the driver's view of the whole GPU: its free bytes
        (outside the pool, which the driver counts as used) and total bytes."""
        stats = super().memory_stats()
        free, total = driver_memory_info()
        stats["driver_free_bytes"], stats["driver_total_bytes"] = free, total
        return stats
