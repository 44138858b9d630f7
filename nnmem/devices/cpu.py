"""The CPU device: the pool's bytes are host memory, kernels are nnmem.kernels.cpu.

Kernels run on the calling thread (the compute stream is inline); copies between a tensor and
a host buffer can be queued on a worker thread (the copy stream), the CPU stand-in for a GPU's
copy engine, so the offload engine runs here unchanged.

A CPU has no link between device and host memory to be slow: both are RAM. To study what a
GPU's PCIe link does to offloading without a GPU, ``link_gbps`` sets the speed of the copy
stream's asynchronous copies: each takes at least bytes / (link_gbps * 1e9) seconds (the copy,
then a sleep for the rest of that time; both release the GIL, and so do the kernels, so copies
and compute overlap as on a GPU).
"""

import math
import numbers
import time

import numpy as np

from nnmem.kernels import cpu as cpu_kernels
from nnmem.kernels.cpu import threads as kernel_threads
from nnmem.memory.storage import HostStorage

from .base import Device
from .streams import Event, InlineStream, WorkerStream


class CpuDevice(Device):
    kind = "cpu"
    kernels = cpu_kernels

    def __init__(self, pool_bytes, policy="best_fit", name="cpu", dev_id=-1, link_gbps=None):
        if link_gbps is not None and not (
            isinstance(link_gbps, numbers.Real)
            and not isinstance(link_gbps, bool)
            and math.isfinite(link_gbps)
            and link_gbps > 0
        ):
            raise ValueError(
                f"link_gbps={link_gbps!r}: give the copy link's speed in GB/s as a positive "
                "number (e.g. 8 for PCIe 3 x16), or None for copies at memory speed"
            )
        super().__init__(pool_bytes, policy, name, dev_id)
        self.link_gbps = link_gbps
        self.compute_stream = InlineStream()
        self.copy_stream = WorkerStream(f"nnmem {name} copy stream")

    def _make_storage(self, capacity, alignment):
        return HostStorage(capacity, alignment)

    def threading_layer(self):
        """Numba's threading layer the kernels run on: "tbb", "omp" or "workqueue"."""
        return kernel_threads.threading_layer()

    def can_corun(self):
        """Can kernels be launched from several threads at once (co-running operations)?"""
        return self.threading_layer() in kernel_threads.THREAD_SAFE_LAYERS

    def _write_from_host(self, tensor, write):
        write(tensor.raw)  # straight into the pool's bytes: host memory already

    def to_host(self, tensor, out=None):
        with self.lock:
            tensor.block.check_written()
            if out is None:
                return tensor.raw.copy()
            np.copyto(out, tensor.raw)
            return out

    def copy_tensor(self, dst, src):
        np.copyto(dst.raw, src.raw)

    def create_stream(self):
        return WorkerStream(f"nnmem {self.name} stream")

    def create_event(self):
        return Event()

    def copy_to_host_async(self, tensor, out, stream):
        self.queue_copy(out, tensor.raw, stream, f"copy of {tensor.block} to the host")

    def copy_from_host_async(self, tensor, host, stream):
        self.queue_copy(tensor.raw, host, stream, f"copy into {tensor.block} from the host")

    def queue_copy(self, dst, src, stream, label):
        stream.submit(self._link_copy, dst, src, label)

    def _link_copy(self, dst, src, label):
        """dst = src, taking as long as the link needs (link_gbps), at least."""
        start = time.perf_counter()
        try:
            np.copyto(dst, src)
        except Exception as e:
            raise RuntimeError(f"{label} failed: {e}") from e
        if self.link_gbps is not None:
            remaining = dst.nbytes / (self.link_gbps * 1e9) - (time.perf_counter() - start)
            if remaining > 0:
                time.sleep(remaining)
