"""Shapes and strides for the strided kernels (kernels/cpu/strided.py): views as index maps.

Every helper returns plain tuples padded on the left to MAX_DIMS axes, the form the kernels
take. Strides count elements of a C-contiguous (row-major) tensor.
"""

import numpy as np

# The strided kernels take index maps of MAX_DIMS axes: the kernel contract says how many.
from nnmem.kernels.contract import MAX_DIMS


def check_rank(op, shape):
    if len(shape) > MAX_DIMS:
        raise ValueError(
            f"{op}: tensors of up to {MAX_DIMS} dimensions are supported, not {len(shape)} "
            f"(shape {tuple(shape)}); reshape it to fewer dimensions"
        )


def axis_index(op, axis, ndim):
    """`axis` (negative counts from the end, as in NumPy) as an index in 0..ndim-1; ValueError
    outside -ndim..ndim-1, where `% ndim` would silently take another axis."""
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"{op}: axis {axis} is out of range for a {ndim}-D tensor (give {-ndim} to {ndim - 1})"
        )
    return axis % ndim


def pad(values, fill):
    """`values` padded on the left with `fill` to MAX_DIMS entries."""
    return (fill,) * (MAX_DIMS - len(values)) + tuple(int(v) for v in values)


def contiguous_strides(shape):
    """Row-major strides of `shape`, in elements."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def broadcast_shape(op, a, b):
    """NumPy's broadcast of two shapes, or a ValueError naming both."""
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise ValueError(
            f"{op}: shapes {tuple(a)} and {tuple(b)} do not broadcast (each axis, aligned "
            "from the right, must be equal or 1); reshape one of them"
        ) from None


def broadcast_strides(shape, out_shape):
    """Strides that read a tensor of `shape` as if it had `out_shape` (0 on broadcast axes),
    padded to MAX_DIMS."""
    strides = contiguous_strides(shape)
    lead = len(out_shape) - len(shape)
    own = [0 if size == 1 else stride for size, stride in zip(shape, strides)]
    return pad([0] * lead + own, 0)


def reduction(shape, out_shape):
    """(shape, strides, rshape, rstrides) for reduce_sum: summing a contiguous tensor of
    `shape` down to `out_shape` (same rank, 1 on every summed axis), padded to MAX_DIMS."""
    strides = contiguous_strides(shape)
    kept = [s if o == n else 0 for n, o, s in zip(shape, out_shape, strides)]
    summed = [s if o != n else 0 for n, o, s in zip(shape, out_shape, strides)]
    rshape = [n if o != n else 1 for n, o in zip(shape, out_shape)]
    return pad(out_shape, 1), pad(kept, 0), pad(rshape, 1), pad(summed, 0)
