"""SINGA's device module: create the device a model runs on.

    create_cpu_device()       host memory, Numba CPU kernels (nnmem/devices/cpu.py)
    create_cuda_gpu()         one GPU: a pool in device memory, Numba CUDA kernels (devices/cuda.py)
    create_planning_device()  no bytes and no kernels: plans memory on shapes alone

Each owns one preallocated memory pool and runs, or records, operations; what they share, and
where they differ, is in nnmem/devices/base.py.
"""

import operator
import os

from nnmem.devices.base import Device
from nnmem.devices.cpu import CpuDevice
from nnmem.devices.planning import PlanningDevice

__all__ = [
    "Device",
    "CpuDevice",
    "PlanningDevice",
    "DeviceUnavailable",
    "create_cpu_device",
    "create_planning_device",
    "create_cuda_gpu",
    "create_cuda_gpu_on",
    "get_default_device",
]

DEFAULT_POOL_BYTES = "2GiB"


class DeviceUnavailable(RuntimeError):
    """The requested kind of device cannot be created on this machine."""


def _pool_bytes(pool_bytes):
    if pool_bytes is None:
        return os.environ.get("NNMEM_POOL_BYTES", DEFAULT_POOL_BYTES)
    return pool_bytes


def create_cpu_device(pool_bytes=None, strategy="best_fit", link_gbps=None):
    """A CPU device whose pool preallocates `pool_bytes` (int or "2GiB"; default 2 GiB, or
    the environment variable NNMEM_POOL_BYTES). `strategy` is "best_fit" or "first_fit".
    `link_gbps`: the speed, in GB/s, of its asynchronous copies to and from host buffers (a
    GPU's PCIe link, simulated; default: memory speed)."""
    return CpuDevice(_pool_bytes(pool_bytes), strategy=strategy, link_gbps=link_gbps)


def create_planning_device(pool_bytes=2**50, strategy="best_fit"):
    """A planning device: nothing runs, no byte is used, and its pool's statistics are what a
    real pool would show (default: 1 PiB, no limit)."""
    return PlanningDevice(pool_bytes, strategy=strategy)


_default_device = None


def get_default_device():
    """The process-wide default CPU device (created on first use)."""
    global _default_device
    if _default_device is None:
        _default_device = create_cpu_device()
    return _default_device


def create_cuda_gpu(pool_bytes=None, strategy="best_fit"):
    """A CUDA device on GPU 0 (see create_cuda_gpu_on)."""
    return create_cuda_gpu_on(0, pool_bytes, strategy)


def create_cuda_gpu_on(device_id, pool_bytes=None, strategy="best_fit"):
    """A CUDA device on GPU `device_id`, whose pool is one device array of `pool_bytes`
    (default: the GPU's free memory but 1 GiB left to the CUDA context; NNMEM_POOL_BYTES
    overrides). Raises DeviceUnavailable, saying why, on a machine without a usable GPU."""
    try:
        # Imported here, not at the top: numba.cuda is an optional dependency (the `cuda`
        # extra), slow to import, and useless on the many machines without a GPU.
        from nnmem.devices import cuda as cuda_device
    except ImportError as e:
        raise DeviceUnavailable(
            f"create_cuda_gpu(): numba.cuda cannot be imported ({e}); install the CUDA extra "
            '(pip install "nnmem[cuda]") on a machine with an NVIDIA GPU, or use '
            "device.create_cpu_device() (the same model code runs on it unchanged)"
        ) from None
    if not cuda_device.cuda.is_available():
        raise DeviceUnavailable(
            "create_cuda_gpu(): no CUDA GPU is available on this machine (numba.cuda found no "
            "driver or no device); use device.create_cpu_device() (the same model code runs on "
            "it unchanged), or set NUMBA_ENABLE_CUDASIM=1 to simulate one (slowly)"
        )
    if pool_bytes is None and "NNMEM_POOL_BYTES" in os.environ:
        pool_bytes = os.environ["NNMEM_POOL_BYTES"]
    device_id = operator.index(device_id)  # 0.9 or "0" is a mistake, not GPU 0
    gpus = len(cuda_device.cuda.gpus)
    if not 0 <= device_id < gpus:
        raise DeviceUnavailable(
            f"create_cuda_gpu_on({device_id}): this machine has {gpus} GPU(s), numbered 0 to "
            f"{gpus - 1}"
        )
    return cuda_device.CudaDevice(pool_bytes, strategy=strategy, dev_id=device_id)
