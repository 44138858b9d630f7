"""SINGA's device module: create the device a model runs on.

    create_cpu_device()       host memory, Numba CPU kernels (nnmem/devices/cpu.py)
    create_cuda_gpu()         one GPU: a pool in device memory, Numba CUDA kernels (devices/cuda.py)
    create_planning_device()  no bytes and no kernels: plans memory on shapes alone

Each owns one preallocated memory pool and runs, or records, operations; what they share, and
where they differ, is in nnmem/devices/base.py.

SINGA's example scripts hard-code create_cuda_gpu_on(0). On a machine without a GPU they run
unchanged when the environment says so: NNMEM_CUDA_FALLBACK=cpu makes create_cuda_gpu() and
create_cuda_gpu_on(id) return the default CPU device (saying so on stderr) instead of raising
DeviceUnavailable. It is an opt-in, never the default: a program that asked for a GPU and
silently got a CPU would run a hundred times slower without saying why.
"""

import operator
import os
import sys
import threading

from nnmem.devices.base import Device
from nnmem.devices.cpu import CpuDevice
from nnmem.devices.planning import PlanningDevice
from nnmem.memory.units import parse_bytes

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
    "get_num_gpus",
    "get_gpu_ids",
    "enable_lazy_alloc",
    "CUDA_FALLBACK_VARIABLE",
]

DEFAULT_POOL_BYTES = "2GiB"
#: The opt-in of SINGA's GPU scripts to the CPU (see the module's docstring), and its values.
CUDA_FALLBACK_VARIABLE = "NNMEM_CUDA_FALLBACK"
CUDA_FALLBACK_VALUES = ("cpu",)


class DeviceUnavailable(RuntimeError):
    """The requested kind of device cannot be created on this machine."""


def default_pool_bytes():
    """The pool size of a CPU device made without one: NNMEM_POOL_BYTES (unset or empty: 2
    GiB); a value that is not a size names the variable."""
    value = os.environ.get("NNMEM_POOL_BYTES") or DEFAULT_POOL_BYTES
    try:
        return parse_bytes(value)
    except ValueError as e:
        raise ValueError(f"the environment variable NNMEM_POOL_BYTES: {e}") from None


def _pool_bytes(pool_bytes):
    return default_pool_bytes() if pool_bytes is None else pool_bytes


def create_cpu_device(pool_bytes=None, policy=None, link_gbps=None):
    """With no argument: the process-wide default CPU device (get_default_device()), as in
    SINGA, where create_cpu_device() returns the default device, so tensors made without a
    device (on the default one) and tensors made on this device can meet in one operation.

    With any argument, a new CPU device whose pool preallocates `pool_bytes` (int or "2GiB";
    default 2 GiB, or the environment variable NNMEM_POOL_BYTES). `policy`, the pool's fit
    policy, is "best_fit" (default) or "first_fit". `link_gbps`: the speed, in GB/s, of its
    asynchronous copies to and from host buffers (a GPU's PCIe link, simulated; default:
    memory speed)."""
    if pool_bytes is None and policy is None and link_gbps is None:
        return get_default_device()
    policy = "best_fit" if policy is None else policy
    return CpuDevice(_pool_bytes(pool_bytes), policy=policy, link_gbps=link_gbps)


def create_planning_device(pool_bytes=2**50, policy="best_fit", plans_for="cpu", link_gbps=None):
    """A planning device: nothing runs, no byte is used, and its pool's statistics are what a
    real pool of a `plans_for` device ("cpu" or "cuda") would show (default: 1 PiB, no
    limit). `link_gbps`: the copy link's speed that the optimal planner assumes there."""
    return PlanningDevice(pool_bytes, policy=policy, plans_for=plans_for, link_gbps=link_gbps)


_default_device = None
_default_device_lock = threading.Lock()  # two threads' first tensors must share one device


def get_default_device():
    """The process-wide default CPU device (created on first use, with the default pool)."""
    global _default_device
    with _default_device_lock:
        if _default_device is None:
            _default_device = CpuDevice(_pool_bytes(None), policy="best_fit")
        return _default_device


def get_gpu_ids():
    """The ids of this machine's usable GPUs: 0 to get_num_gpus() - 1."""
    return list(range(get_num_gpus()))


def enable_lazy_alloc(enable):
    """SINGA's switch between lazy allocation (a block gets its bytes at its first write, SINGA's
    default) and allocation when a tensor is made. nnmem always allocates lazily: its pool and
    its graph planner place a block at its first writer, so enable_lazy_alloc(True) changes
    nothing and enable_lazy_alloc(False) is an error rather than a switch that does nothing."""
    if not isinstance(enable, bool):
        raise TypeError(f"enable_lazy_alloc({enable!r}): give True or False")
    if not enable:
        raise ValueError(
            "enable_lazy_alloc(False): nnmem always allocates a tensor's memory at its first "
            "write (its graph planner places blocks there); only True is supported"
        )


def get_num_gpus():
    """How many GPUs create_cuda_gpu_on can use: 0 where numba.cuda cannot be imported or finds
    no GPU (SINGA asserts that it was built with CUDA instead; a count answers the question
    SINGA's scripts ask with it). The CUDA simulator (NUMBA_ENABLE_CUDASIM=1) counts as one."""
    cuda = _numba_cuda()
    return len(cuda.gpus) if cuda is not None and cuda.is_available() else 0


def _numba_cuda():
    """numba.cuda, or None where it cannot be imported. Imported here, not at the top:
    numba.cuda is an optional dependency (the `cuda` extra), slow to import (half a second),
    and useless on the many machines without a GPU."""
    try:
        from numba import cuda
    except ImportError:
        return None
    return cuda


def _cuda_fallback():
    """NNMEM_CUDA_FALLBACK's value: None when unset or empty (no fallback), else "cpu"."""
    value = os.environ.get(CUDA_FALLBACK_VARIABLE, "")
    if value == "":
        return None
    if value not in CUDA_FALLBACK_VALUES:
        raise ValueError(
            f"{CUDA_FALLBACK_VARIABLE}={value!r}: the allowed values are "
            + ", ".join(repr(v) for v in CUDA_FALLBACK_VALUES)
            + " (use the default CPU device where no GPU is available) or unset/empty "
            "(no GPU is a DeviceUnavailable error)"
        )
    return value


def create_cuda_gpu(pool_bytes=None, policy="best_fit"):
    """A CUDA device on GPU 0 (see create_cuda_gpu_on)."""
    return _create_cuda(0, pool_bytes, policy, "create_cuda_gpu()")


def create_cuda_gpu_on(device_id, pool_bytes=None, policy="best_fit"):
    """A CUDA device on GPU `device_id`, whose pool is one device array of `pool_bytes`
    (default: the GPU's free memory but 1 GiB left to the CUDA context; NNMEM_POOL_BYTES
    overrides). Raises DeviceUnavailable, saying why, on a machine without a usable GPU;
    with NNMEM_CUDA_FALLBACK=cpu, returns the default CPU device there instead (pool_bytes
    and policy are then those of the default device), saying so in one line on stderr.
    A GPU number this machine does not have is an error either way."""
    return _create_cuda(device_id, pool_bytes, policy, f"create_cuda_gpu_on({device_id!r})")


#: What to do about a missing CUDA: install it, or use the CPU.
_INSTALL_CUDA = (
    'install the CUDA extra (pip install "nnmem[cuda]") on a machine with an NVIDIA GPU, or use '
    "device.create_cpu_device() (the same model code runs on it unchanged)"
)
_USE_THE_CPU = (
    "use device.create_cpu_device() (the same model code runs on it unchanged), or set "
    "NUMBA_ENABLE_CUDASIM=1 to simulate one (slowly)"
)


def _create_cuda(device_id, pool_bytes, policy, call):
    device_id = operator.index(device_id)  # 0.9 or "0" is a mistake, not GPU 0
    fallback = _cuda_fallback()  # a bad value is an error with or without a GPU
    cuda, cuda_device = _numba_cuda(), None
    if cuda is None:
        reason, advice = "numba.cuda cannot be imported", _INSTALL_CUDA
    elif not cuda.is_available():
        reason = "no CUDA GPU is available on this machine (numba.cuda found no driver or device)"
        advice = _USE_THE_CPU
    else:
        gpus = len(cuda.gpus)
        if not 0 <= device_id < gpus:  # a mistake, not a missing GPU: no fallback
            raise DeviceUnavailable(
                f"{call}: this machine has {gpus} GPU(s), numbered 0 to {gpus - 1}"
            )
        try:
            # Imported here, not at the top, for the reasons of _numba_cuda, which it imports.
            from nnmem.devices import cuda as cuda_device
        except ImportError as e:
            reason, advice = f"nnmem's CUDA device cannot be imported ({e})", _INSTALL_CUDA
    if cuda_device is not None:
        if pool_bytes is None and os.environ.get("NNMEM_POOL_BYTES"):
            pool_bytes = default_pool_bytes()
        return cuda_device.CudaDevice(pool_bytes, policy=policy, dev_id=device_id)
    if fallback == "cpu":
        print(
            f"nnmem: {call}: {reason}; {CUDA_FALLBACK_VARIABLE}=cpu: using the default CPU "
            "device instead",
            file=sys.stderr,
        )
        return get_default_device()
    raise DeviceUnavailable(
        f"{call}: {reason}; {advice}; {CUDA_FALLBACK_VARIABLE}=cpu runs SINGA scripts that "
        "hard-code a GPU on the CPU instead"
    )
