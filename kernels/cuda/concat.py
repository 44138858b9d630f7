"""Concatenation as copies of column blocks (kernels/cpu/concat.py's contract).

Any concatenation along an axis is one of 2-D matrices: view every array as (rows, columns)
with rows = the product of the dimensions before the axis and columns = the rest. Input k then
fills columns [offset_k, offset_k + its columns) of the output, and its gradient is that block
of the output's gradient.

One thread per element of the narrow array (x, or dx): thread i copies element
(r, j) = (i // cols, i % cols), so a warp copies a run of consecutive columns of one row, a
contiguous run of memory on both sides (coalesced). No kernel allocates.
"""

from numba import cuda

from ._launch import A2, check_device, each_float, float_dtype, kernel, launch_1d


@kernel(*each_float(f"void({A2}, {A2}, int64)"))
def _concat_copy_in_kernel(y, x, offset):
    """Thread i: element (r, j) = (i // xcols, i % xcols) of x, to y[r, offset + j]."""
    i = cuda.grid(1)
    nrow, ncol = x.shape
    if i < nrow * ncol:
        r = i // ncol
        j = i % ncol
        y[r, offset + j] = x[r, j]


@kernel(*each_float(f"void({A2}, {A2}, int64)"))
def _concat_copy_out_kernel(dx, dy, offset):
    """Thread i: element (r, j) of dx, from dy[r, offset + j]."""
    i = cuda.grid(1)
    nrow, ncol = dx.shape
    if i < nrow * ncol:
        r = i // ncol
        j = i % ncol
        dx[r, j] = dy[r, offset + j]


def _check_concat(name, wide, narrow, offset, labels):
    """wide (rows, wcols) holds narrow (rows, ncols) at columns offset .. offset + ncols - 1."""
    arrays = dict(zip(labels, (wide, narrow)))
    check_device(name, ndim=2, **arrays)
    float_dtype(name, **arrays)
    if wide.shape[0] != narrow.shape[0] or not 0 <= offset <= wide.shape[1] - narrow.shape[1]:
        raise ValueError(
            f"{name}: need the same rows and 0 <= offset <= {wide.shape[1]} - {narrow.shape[1]}; "
            f"got shapes {wide.shape}, {narrow.shape} and offset {offset}"
        )


def concat_copy_in(y, x, offset, *, stream=0):
    """y[:, offset:offset+xcols] = x for y (rows, ycols), x (rows, xcols) (Cat along any axis,
    with the arrays viewed as 2-D). Writes that block of y; one thread per element of x."""
    _check_concat("concat_copy_in", y, x, offset, ("y", "x"))
    launch_1d(_concat_copy_in_kernel, x.size, stream, y, x, int(offset))


def concat_copy_out(dx, dy, offset, *, stream=0):
    """dx[:, :] = dy[:, offset:offset+dx.shape[1]] (the gradient of concat_copy_in).
    Writes dx; one thread per element of dx."""
    _check_concat("concat_copy_out", dy, dx, offset, ("dy", "dx"))
    launch_1d(_concat_copy_out_kernel, dx.size, stream, dx, dy, int(offset))
