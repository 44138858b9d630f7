"""Helpers shared by the CUDA kernel tests (imported by name: this folder has no __init__.py)."""

import numpy as np
import pytest

try:
    from numba import cuda
except ImportError:  # a Numba without its CUDA target
    cuda = None

#: True under NUMBA_ENABLE_CUDASIM=1 or with a GPU: the kernels can run.
RUNS_KERNELS = cuda is not None and cuda.is_available()

needs_device = pytest.mark.skipif(
    not RUNS_KERNELS,
    reason="needs a GPU or NUMBA_ENABLE_CUDASIM=1 (run in its own pytest process: .ci/run does)",
)

#: float32 results against the CPU kernels: different summation orders, a few ulps apart.
RTOL32, ATOL32 = 2e-5, 2e-5
RTOL64, ATOL64 = 1e-10, 1e-10


def to_device(a):
    """A device copy of a host array (C-contiguous)."""
    return cuda.to_device(np.ascontiguousarray(a))


def empty_like(a):
    """A device array with a's shape and dtype, holding garbage (NaN for floats): a kernel that
    forgets to write an element shows it."""
    fill = np.nan if np.dtype(a.dtype).kind == "f" else -7
    return cuda.to_device(np.full(np.shape(a), fill, dtype=a.dtype))


def host(d):
    return d.copy_to_host()


def assert_close(actual, expected, dtype=np.float32):
    if np.dtype(dtype) == np.float64:
        np.testing.assert_allclose(actual, expected, rtol=RTOL64, atol=ATOL64)
    else:
        np.testing.assert_allclose(actual, expected, rtol=RTOL32, atol=ATOL32)


def run_twins(name, args, writes, dtype=np.float32, exact=False):
    """Run kernels.cpu.<name> on host copies of `args` and kernels.cuda.<name> on device copies
    (scalars pass as they are), and compare the arguments listed in `writes` (indices).
    Returns (cpu results, cuda results) for those arguments, as host arrays."""
    from nnmem.kernels import cpu
    from nnmem.kernels import cuda as gpu

    on_cpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    on_gpu = [to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    getattr(cpu, name)(*on_cpu)
    getattr(gpu, name)(*on_gpu)
    want = [on_cpu[i] for i in writes]
    got = [host(on_gpu[i]) for i in writes]
    for i, w, g in zip(writes, want, got):
        if exact:
            np.testing.assert_array_equal(g, w, err_msg=f"{name}: argument {i}")
        elif np.dtype(w.dtype).kind == "f":
            assert_close(g, w, dtype)
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{name}: argument {i}")
    return want, got
