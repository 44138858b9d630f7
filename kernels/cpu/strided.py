"""Strided kernels: one index map serves transposes, slices, broadcasts and reductions.

A tensor is a flat array in its block; an n-D view of it is a shape and one stride per axis
(elements, not bytes): element (i0, ..., i5) of the view is ``a[offset + sum_k i_k * s_k]``.
A transpose permutes the strides, a slice adds an offset and keeps them, a broadcast gives the
repeated axes stride 0, a reduction walks the reduced axes' strides. So four kernels, each over
flat arrays with shapes and strides padded to ``MAX_DIMS`` axes (leading axes of size 1), do
the work of a dozen operations:

    strided_gather(out, x, shape, strides, offset)      out[i] = x[offset + idx(i) . strides]
    strided_scatter(out, x, shape, strides, offset)     out[offset + idx(i) . strides] = x[i]
    reduce_sum(out, x, shape, strides, rshape, rstrides)
        out[i] = sum_r x[idx(i) . strides + idx_r(r) . rstrides]
    broadcast_binary(out, a, b, shape, astrides, bstrides, code)
        out[i] = a[idx(i) . astrides] <code> b[idx(i) . bstrides]

idx(i) is the multi-index of i in `shape` (row-major). Every output element is written by one
loop iteration (a scatter writes distinct elements: its map is one-to-one), and a sum runs in
a fixed order in float64, so each kernel is bit-identical on every call. None allocates.
The gather and the binary map are parallel (``prange``): they are the transposes and
broadcasts of attention-sized tensors; the scatter and the reduction are short loops.
"""

import math

from numba import int64, prange

from ..contract import MAX_DIMS
from ._jit import njit

# The codes of kernels/contract.py's BINARY_CODES, by name (a test checks they agree).
(ADD, SUB, MUL, DIV, POW, MAX, MIN, GT, GE, LT, LE, EQ, AND, OR, XOR, POW_DA, POW_DB) = range(17)


def _offset_of(i, shape, strides):
    """The offset of flat index `i` of a row-major `shape` under `strides`."""
    i = int64(i)  # a prange index is unsigned, and unsigned % signed is a float in Numba
    off = 0
    for d in range(MAX_DIMS - 1, -1, -1):
        size = shape[d]
        off += (i % size) * strides[d]
        i //= size
    return off


offset_of = njit(cache=True)(_offset_of)


def _volume(shape):
    n = 1
    for d in range(MAX_DIMS):
        n *= shape[d]
    return n


volume = njit(cache=True)(_volume)


def _strided_gather(out, x, shape, strides, offset):
    """out[i] = x[offset + idx(i) . strides] for every i < out.size == prod(shape)."""
    if out.size != volume(shape):
        raise ValueError("strided_gather: out must have prod(shape) elements")
    for i in prange(out.size):
        out[i] = x[offset + offset_of(i, shape, strides)]


def _strided_scatter(out, x, shape, strides, offset):
    """out[offset + idx(i) . strides] = x[i] for every i < x.size == prod(shape); the other
    elements of out are left as they are. The map must be one-to-one (a slice, a transpose)."""
    if x.size != volume(shape):
        raise ValueError("strided_scatter: x must have prod(shape) elements")
    for i in range(x.size):
        out[offset + offset_of(i, shape, strides)] = x[i]


def _reduce_sum(out, x, shape, strides, rshape, rstrides):
    """out[i] = sum over r < prod(rshape) of x[idx(i) . strides + idx_r(r) . rstrides],
    summed in that order in float64. Overwrites out."""
    if out.size != volume(shape):
        raise ValueError("reduce_sum: out must have prod(shape) elements")
    n = volume(rshape)
    for i in range(out.size):
        base = offset_of(i, shape, strides)
        s = 0.0
        for r in range(n):
            s += x[base + offset_of(r, rshape, rstrides)]
        out[i] = s


def _binary_op(u, v, code):
    if code == ADD:
        return u + v
    if code == SUB:
        return u - v
    if code == MUL:
        return u * v
    if code == DIV:
        return u / v
    if code == POW:
        return u**v
    if code == MAX:
        return u if u >= v else v
    if code == MIN:
        return u if u <= v else v
    if code == GT:
        return 1.0 if u > v else 0.0
    if code == GE:
        return 1.0 if u >= v else 0.0
    if code == LT:
        return 1.0 if u < v else 0.0
    if code == LE:
        return 1.0 if u <= v else 0.0
    if code == EQ:
        return 1.0 if u == v else 0.0
    if code == AND:
        return 1.0 if u != 0 and v != 0 else 0.0
    if code == OR:
        return 1.0 if u != 0 or v != 0 else 0.0
    if code == XOR:
        return 1.0 if (u != 0) != (v != 0) else 0.0
    if code == POW_DA:
        return v * u ** (v - 1)
    return u**v * math.log(u) if u > 0 else 0.0 * u  # POW_DB (0 where u^v is flat in v)


binary_op = njit(cache=True)(_binary_op)


def _broadcast_binary(out, a, b, shape, astrides, bstrides, code):
    """out[i] = a[idx(i) . astrides] <code> b[idx(i) . bstrides]: arithmetic (add, sub, mul,
    div, pow, max, min), comparison (gt, ge, lt, le, eq) or logic (and, or, xor: nonzero is
    true; 1.0 or 0.0) with NumPy's broadcasting (a broadcast axis has stride 0). Writes out;
    division by zero gives inf or nan as IEEE says."""
    if out.size != volume(shape):
        raise ValueError("broadcast_binary: out must have prod(shape) elements")
    for i in prange(out.size):
        u = a[offset_of(i, shape, astrides)]
        v = b[offset_of(i, shape, bstrides)]
        out[i] = binary_op(u, v, code)


strided_gather = njit(parallel=True, cache=True)(_strided_gather)
strided_scatter = njit(cache=True)(_strided_scatter)
reduce_sum = njit(cache=True)(_reduce_sum)
broadcast_binary = njit(parallel=True, cache=True)(_broadcast_binary)
