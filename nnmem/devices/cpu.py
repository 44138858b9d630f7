"""The CPU device: the pool's bytes are host memory, kernels are nnmem.kernels.cpu.

Kernels run on the calling thread (the compute stream is inline); copies between a tensor and
a host buffer can be queued on a worker thread (the copy stream), the CPU stand-in for a GPU's
copy engine, so the offload engine runs here unchanged.
"""

import numpy as np

from nnmem.kernels import cpu as cpu_kernels
from nnmem.memory.storage import HostStorage

from .base import Device
from .streams import Event, InlineStream, WorkerStream


class CpuDevice(Device):
    kind = "cpu"
    kernels = cpu_kernels

    def __init__(self, pool_bytes, strategy="best_fit", name="cpu", dev_id=-1):
        super().__init__(pool_bytes, strategy, name, dev_id)
        self.compute_stream = InlineStream()
        self.copy_stream = WorkerStream(f"nnmem {name} copy stream")

    def _make_storage(self, capacity, alignment):
        return HostStorage(capacity, alignment)

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
        stream.submit(np.copyto, out, tensor.raw)

    def copy_from_host_async(self, tensor, host, stream):
        stream.submit(np.copyto, tensor.raw, host)
