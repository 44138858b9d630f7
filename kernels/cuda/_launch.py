"""How the CUDA kernels are made and launched: block sizes, grid sizes, host-side argument checks,
and the registry of every kernel with the signatures it is launched with.

Lazy compilation. ``kernel(...)`` below is ``numba.cuda.jit`` *without* a signature, so importing
kernels.cuda compiles nothing and works on a machine without a GPU; Numba compiles a kernel at
its first launch, for the types of that launch's arguments. The signatures given to ``kernel``
are a record, not a compilation request: they are the exact types the host functions launch
with (they turn every scalar into a Python int, float or bool, or a NumPy uint64, and accept
only C-contiguous device arrays of the listed dtypes), and tests/cuda/test_ptx.py compiles every
one of them to PTX. The CUDA simulator runs kernels as Python and checks no types, so that test
is what catches a kernel that would not compile on a real GPU.

The host functions never copy, synchronise or allocate: an array's shape, strides and dtype live
on the host, so checking them costs no device access; a launch only queues work on a stream.

float16 is a storage dtype: every kernel takes float16, float32 or float64 arrays. A float16
kernel reads half-precision values, widens each to float32 as it is loaded (``widen``), does all
its arithmetic and accumulation in float32 (``acc_zero``), or in float64 where the float32
kernel does, and rounds once, when it stores. So a float16 kernel computes what its float32
twin computes on the widened values, and float32 and float64 kernels are left exactly as they
were: both helpers are the identity for them.
"""

from dataclasses import dataclass

import numpy as np
from numba import cuda, float32, types
from numba.cuda.extending import overload

from ._cache import attach_cache

__all__ = [
    "THREADS",
    "TILE",
    "REDUCE_THREADS",
    "ROW_THREADS",
    "Kernel",
    "KERNELS",
    "DEVICE_FUNCTIONS",
    "kernel",
    "device_function",
    "unravel4",
    "widen",
    "acc_zero",
    "each_float",
    "blocks",
    "launch_1d",
    "check_device",
    "float_dtype",
    "check_dtype",
]

#: Threads per block of the one-thread-per-element kernels: a multiple of the 32-thread warp,
#: small enough that a block never runs out of registers.
THREADS = 256
#: Side of the square tiles of the shared-memory GEMM (a TILE x TILE block of threads).
TILE = 16
#: Threads per block of the block reductions (one block per channel, or one block in all);
#: a power of two, which the tree reduction needs.
REDUCE_THREADS = 128
#: Threads per block of the kernels that give one block to each row of a loss (rows are short:
#: one per class): one warp.
ROW_THREADS = 32

# Type templates for the signatures below: {T} becomes float16, float32 or float64. "::1" marks the
# contiguous last axis: the host functions only accept C-contiguous arrays, which Numba types
# with layout "C", so these are the types every launch has.
A1 = "{T}[::1]"
A2 = "{T}[:, ::1]"
A3 = "{T}[:, :, ::1]"
A4 = "{T}[:, :, :, ::1]"
FLOATS = ("float16", "float32", "float64")


@dataclass(frozen=True)
class Kernel:
    """One registered kernel: its Python source, Numba's dispatcher, the signatures it is
    launched with (strings in Numba's type syntax, e.g. ``"void(float32[::1], float64)"``)."""

    name: str
    py_func: object
    dispatcher: object
    signatures: tuple


#: "module.function" -> Kernel, for every kernel in kernels/cuda.
KERNELS = {}
#: "module.function" -> dispatcher, for every device function (compiled into the kernels that
#: call it, and so checked by their PTX).
DEVICE_FUNCTIONS = {}


def each_float(template):
    """The template's signature once for each float dtype: {T} = float16, float32, float64."""
    return tuple(template.format(T=t) for t in FLOATS)


def kernel(*signatures):
    """Decorator: ``numba.cuda.jit`` (lazy), recording the kernel and its launch signatures."""
    if not signatures:
        raise ValueError("kernel: list the signatures the kernel is launched with")

    def decorate(py_func):
        dispatcher = cuda.jit(py_func)
        attach_cache(dispatcher)  # compiled code kept on disk, outside the package (_cache.py)
        name = f"{py_func.__module__}.{py_func.__name__}"
        KERNELS[name] = Kernel(name, py_func, dispatcher, tuple(signatures))
        return dispatcher

    return decorate


def device_function(py_func):
    """``numba.cuda.jit(device=True)``, recorded: a function that kernels call."""
    dispatcher = cuda.jit(device=True)(py_func)
    DEVICE_FUNCTIONS[f"{py_func.__module__}.{py_func.__name__}"] = dispatcher
    return dispatcher


def blocks(n, threads=THREADS):
    """Blocks of `threads` threads that cover n items: ceil(n / threads)."""
    return (n + threads - 1) // threads


def launch_1d(kern, n, stream, *args):
    """Launch `kern` with one thread per item, n items (nothing to do, and no launch, if n == 0:
    CUDA rejects a grid of zero blocks)."""
    if n > 0:
        kern[blocks(n), THREADS, stream](*args)


def check_device(name, ndim=None, **arrays):
    """Each array must be a C-contiguous CUDA device array (with `ndim` dimensions if given).

    A NumPy array is refused: Numba would accept it and silently copy it to the device and back
    around every launch, the hidden transfer this layer exists to avoid."""
    for label, a in arrays.items():
        if not cuda.devicearray.is_cuda_ndarray(a):
            raise TypeError(
                f"{name}: {label} is a {type(a).__name__}, not a CUDA device array; a host array "
                "would be copied at every launch (move it once with numba.cuda.to_device)"
            )
        if ndim is not None and a.ndim != ndim:
            raise ValueError(f"{name}: {label} must be {ndim}-D, got shape {a.shape}")
        if not a.is_c_contiguous():
            raise ValueError(f"{name}: {label} must be C-contiguous (a view of the device buffer)")


def float_dtype(name, **arrays):
    """The common dtype of the arrays, float16, float32 or float64 (TypeError otherwise)."""
    labels = list(arrays)
    dtype = arrays[labels[0]].dtype
    if dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(
            f"{name}: {labels[0]} has dtype {dtype}; the kernels take float16/float32/float64"
        )
    check_dtype(name, dtype, **arrays)
    return dtype


def check_dtype(name, dtype, **arrays):
    """Each array must have `dtype` (TypeError otherwise)."""
    for label, a in arrays.items():
        if a.dtype != dtype:
            raise TypeError(f"{name}: {label} has dtype {a.dtype}, expected {np.dtype(dtype)}")


@device_function
def unravel4(t, d1, d2, d3):
    """(a, b, c, d) with t = ((a*d1 + b)*d2 + c)*d3 + d: the 4-D index of element t of a
    C-contiguous array of shape (., d1, d2, d3), i.e. the element a thread of a one-thread-per-
    element kernel owns (d runs fastest: consecutive threads, consecutive addresses)."""
    d = t % d3
    c = (t // d3) % d2
    b = (t // (d3 * d2)) % d1
    return t // (d3 * d2 * d1), b, c, d


def widen(x):
    """x as a float32 if it is a float16 (a value loaded from float16 storage), else x itself.

    This body is what the CUDA simulator runs (kernels run as Python there, loads giving NumPy
    scalars); on the GPU the overload below is compiled instead."""
    return np.float32(x) if isinstance(x, np.float16) else x


@overload(widen, target="cuda")
def _widen_on_gpu(x):
    if x == types.float16:
        return lambda x: float32(x)  # cvt.f32.f16: exact, every float16 is a float32
    return lambda x: x


def acc_zero(a):
    """The zero to start a sum over a's elements from: float32 for a float16 array (sums of
    float16 values are taken in float32), a's own dtype otherwise. Simulator body, as widen's."""
    return np.float32(0) if a.dtype == np.float16 else a.dtype.type(0)


@overload(acc_zero, target="cuda")
def _acc_zero_on_gpu(a):
    if a.dtype == types.float16:
        return lambda a: float32(0)
    zero_of = a.dtype
    return lambda a: zero_of(0)
