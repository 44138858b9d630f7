"""ScatterElements (ONNX): a copy of the data with some elements replaced by updates.

For every multi-index i of `indices` (the rank of the data, each axis no longer than the
data's), the update goes to the data's element at i with its `axis` entry replaced by
indices[i]:

    forward:   y = x;   y[i with i_axis := indices[i]] = updates[i]
    backward:  dx = dy; dx[i with i_axis := indices[i]] = 0      (y does not depend on x there)

The arrays are flat; the map is kernels/cpu/strided.py's index map: ``shape`` is the indices'
shape and ``strides`` the data's, both padded to MAX_DIMS, with the axis's stride set to 0, so
that ``offset_of(i, shape, strides) + indices[i] * axis_stride`` is where update i lands. An
index may count from the end (-axis_size <= index < 0); one outside -axis_size..axis_size-1
raises. The updates are written one after another in the indices' row-major order, so of two
updates aimed at one element the later stays (ONNX leaves that case undefined). No allocation.
"""

from numba import prange

from ._jit import njit
from .strided import offset_of, volume


def _target(i, indices, shape, strides, axis_stride, axis_size):
    """Where update i lands: its position in the data with the axis's entry from indices."""
    index = indices[i]
    if index < 0:
        index += axis_size
    if index < 0 or index >= axis_size:
        raise IndexError("scatter_elements: an index is outside -size..size-1 of the axis")
    return offset_of(i, shape, strides) + index * axis_stride


target = njit(cache=True)(_target)


def _scatter_elements_forward(y, x, indices, updates, shape, strides, axis_stride, axis_size):
    """y = x, then y[target(i)] = updates[i] for every i in order. Writes y."""
    if y.size != x.size or updates.size != indices.size or indices.size != volume(shape):
        raise ValueError(
            "scatter_elements_forward: y and x of one size, updates one per index, "
            "indices of prod(shape) elements"
        )
    for i in prange(x.size):
        y[i] = x[i]
    for i in range(indices.size):
        y[target(i, indices, shape, strides, axis_stride, axis_size)] = updates[i]


def _scatter_elements_backward(dx, dy, indices, shape, strides, axis_stride, axis_size):
    """dx = dy, then dx[target(i)] = 0 for every i. Writes dx."""
    if dx.size != dy.size or indices.size != volume(shape):
        raise ValueError(
            "scatter_elements_backward: dx and dy of one size, indices of prod(shape) elements"
        )
    for i in prange(dy.size):
        dx[i] = dy[i]
    for i in range(indices.size):
        dx[target(i, indices, shape, strides, axis_stride, axis_size)] = 0


scatter_elements_forward = njit(cache=True)(_scatter_elements_forward)
scatter_elements_backward = njit(cache=True)(_scatter_elements_backward)
