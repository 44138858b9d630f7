"""Strided kernels on the GPU: the twins of kernels/cpu/strided.py (read its docstring).

One thread per output element, the index arithmetic compiled from the CPU module's own functions
(``offset_of``, ``binary_op``), so both devices compute the same map. The scatter's map is
one-to-one, so its threads never write the same element and need no atomics; a reduced element is
summed by one thread in the CPU's order, in float64: every kernel here is deterministic, and matches
the CPU to rounding (the CPU sums the same terms in the same order, so in practice bit for bit).
float16 values are widened to float32 as they are read. Shapes and strides arrive as tuples of
MAX_DIMS int64 (kernel arguments, copied with the launch: no device memory, no transfer).
"""

from numba import cuda

from ..contract import MAX_DIMS
from ..cpu import strided as cpu_strided
from ._launch import (
    A1,
    check_device,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)

_T = f"UniTuple(int64, {MAX_DIMS})"
offset_of = device_function(cpu_strided._offset_of)
binary_op = device_function(cpu_strided._binary_op)


def _volume(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _check(name, shape, count, what, **arrays):
    check_device(name, ndim=1, **arrays)
    float_dtype(name, **arrays)
    if len(shape) != MAX_DIMS:
        raise ValueError(f"{name}: shapes and strides have {MAX_DIMS} entries, not {len(shape)}")
    if count != _volume(shape):
        raise ValueError(f"{name}: {what} must have prod(shape) elements")


@kernel(*each_float(f"void({A1}, {A1}, {_T}, {_T}, int64)"))
def _gather_kernel(out, x, shape, strides, offset):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[offset + offset_of(i, shape, strides)]


@kernel(*each_float(f"void({A1}, {A1}, {_T}, {_T}, int64)"))
def _scatter_kernel(out, x, shape, strides, offset):
    i = cuda.grid(1)
    if i < x.size:
        out[offset + offset_of(i, shape, strides)] = x[i]


@kernel(*each_float(f"void({A1}, {A1}, {_T}, {_T}, {_T}, {_T}, int64)"))
def _reduce_kernel(out, x, shape, strides, rshape, rstrides, n):
    i = cuda.grid(1)
    if i < out.size:
        base = offset_of(i, shape, strides)
        s = 0.0
        for r in range(n):
            s += widen(x[base + offset_of(r, rshape, rstrides)])
        out[i] = s


@kernel(*each_float(f"void({A1}, {A1}, {A1}, {_T}, {_T}, {_T}, int64)"))
def _binary_kernel(out, a, b, shape, astrides, bstrides, code):
    i = cuda.grid(1)
    if i < out.size:
        u = widen(a[offset_of(i, shape, astrides)])
        v = widen(b[offset_of(i, shape, bstrides)])
        out[i] = binary_op(u, v, code)


def strided_gather(out, x, shape, strides, offset, *, stream=0):
    """out[i] = x[offset + idx(i) . strides]. Writes out."""
    _check("strided_gather", shape, out.size, "out", out=out, x=x)
    launch_1d(_gather_kernel, out.size, stream, out, x, tuple(shape), tuple(strides), offset)


def strided_scatter(out, x, shape, strides, offset, *, stream=0):
    """out[offset + idx(i) . strides] = x[i] (a one-to-one map); other elements are kept."""
    _check("strided_scatter", shape, x.size, "x", out=out, x=x)
    launch_1d(_scatter_kernel, x.size, stream, out, x, tuple(shape), tuple(strides), offset)


def reduce_sum(out, x, shape, strides, rshape, rstrides, *, stream=0):
    """out[i] = sum_r x[idx(i) . strides + idx_r(r) . rstrides], in float64. Overwrites out."""
    _check("reduce_sum", shape, out.size, "out", out=out, x=x)
    args = tuple(shape), tuple(strides), tuple(rshape), tuple(rstrides), _volume(rshape)
    launch_1d(_reduce_kernel, out.size, stream, out, x, *args)


def broadcast_binary(out, a, b, shape, astrides, bstrides, code, *, stream=0):
    """out[i] = a[idx(i) . astrides] <code> b[idx(i) . bstrides] (codes: kernels/cpu/strided)."""
    _check("broadcast_binary", shape, out.size, "out", out=out, a=a, b=b)
    args = tuple(shape), tuple(astrides), tuple(bstrides), code
    launch_1d(_binary_kernel, out.size, stream, out, a, b, *args)
