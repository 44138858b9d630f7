"""ScatterElements on the GPU: the twin of kernels/cpu/scatter.py (read its docstring).

Each pass is two launches on one stream: the copy (elementwise.copy), then one thread per index
that writes its update (forward) or a zero (backward) where the CPU's map puts it (the CPU's
own ``offset_of``). A GPU thread cannot raise: an index outside the axis is skipped, where the
CPU raises. Of two updates aimed at one element, which one stays is not fixed here (the CPU
keeps the later; ONNX leaves it undefined); the backward's zeros are the same either way.
"""

from numba import cuda

from ..contract import MAX_DIMS
from ._launch import A1, check_device, check_dtype, each_float, float_dtype, kernel, launch_1d
from .elementwise import copy
from .strided import offset_of

_T = f"UniTuple(int64, {MAX_DIMS})"
_IDS = A1.format(T="int32")


@kernel(*each_float(f"void({A1}, {_IDS}, {A1}, {_T}, {_T}, int64, int64)"))
def _scatter_kernel(y, indices, updates, shape, strides, axis_stride, axis_size):
    i = cuda.grid(1)
    if i < indices.size:
        index = indices[i]
        if index < 0:
            index += axis_size
        if 0 <= index < axis_size:
            y[offset_of(i, shape, strides) + index * axis_stride] = updates[i]


@kernel(*each_float(f"void({A1}, {_IDS}, {_T}, {_T}, int64, int64)"))
def _zero_kernel(dx, indices, shape, strides, axis_stride, axis_size):
    i = cuda.grid(1)
    if i < indices.size:
        index = indices[i]
        if index < 0:
            index += axis_size
        if 0 <= index < axis_size:
            dx[offset_of(i, shape, strides) + index * axis_stride] = 0


def _check(name, out, src, indices, shape, strides):
    check_device(name, ndim=1, out=out, src=src, indices=indices)
    float_dtype(name, out=out, src=src)
    check_dtype(name, "int32", indices=indices)
    if len(shape) != MAX_DIMS or len(strides) != MAX_DIMS:
        raise ValueError(f"{name}: shape and strides have {MAX_DIMS} entries")
    volume = 1
    for size in shape:
        volume *= int(size)
    if out.size != src.size or indices.size != volume:
        raise ValueError(f"{name}: arrays of one size, indices of prod(shape) elements")


def _map(shape, strides, axis_stride, axis_size):
    """The index map's arguments as the kernels are launched with them (int64 scalars)."""
    shape, strides = tuple(int(s) for s in shape), tuple(int(s) for s in strides)
    return shape, strides, int(axis_stride), int(axis_size)


def scatter_elements_forward(
    y, x, indices, updates, shape, strides, axis_stride, axis_size, *, stream=0
):
    """y = x, then y[target(i)] = updates[i] (kernels/cpu/scatter.py). Writes y."""
    _check("scatter_elements_forward", y, x, indices, shape, strides)
    check_device("scatter_elements_forward", ndim=1, updates=updates)
    check_dtype("scatter_elements_forward", y.dtype, updates=updates)
    if updates.size != indices.size:
        raise ValueError("scatter_elements_forward: updates must have one element per index")
    copy(y, x, stream=stream)
    args = _map(shape, strides, axis_stride, axis_size)
    launch_1d(_scatter_kernel, indices.size, stream, y, indices, updates, *args)


def scatter_elements_backward(dx, dy, indices, shape, strides, axis_stride, axis_size, *, stream=0):
    """dx = dy, then dx[target(i)] = 0 (kernels/cpu/scatter.py). Writes dx."""
    _check("scatter_elements_backward", dx, dy, indices, shape, strides)
    copy(dx, dy, stream=stream)
    args = _map(shape, strides, axis_stride, axis_size)
    launch_1d(_zero_kernel, indices.size, stream, dx, indices, *args)
