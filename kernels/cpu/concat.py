"""Concatenation as copies of column blocks.

Any concatenation along an axis is one of 2-D matrices: view every array as (rows, columns)
with rows = the product of the dimensions before the axis and columns = the rest. Input k then
fills columns [offset_k, offset_k + its columns) of the output, and its gradient is that block
of the output's gradient. No kernel allocates; each row is a contiguous run of memory, so a
block copy is `rows` memcpy-like loops.
"""

from numba import prange

from ._jit import njit


def _check_rows(a, b, offset, cols, what):
    if a.shape[0] != b.shape[0] or offset < 0 or offset + cols > a.shape[1]:
        raise ValueError(f"{what}: the block does not fit (rows differ, or columns overflow)")


check_rows = njit(cache=True)(_check_rows)


def _concat_copy_in(y, x, offset):
    """y[:, offset : offset + x.shape[1]] = x, for y (R, Cy) and x (R, Cx). Writes that block."""
    check_rows(y, x, offset, x.shape[1], "concat_copy_in")
    for r in prange(x.shape[0]):
        for c in range(x.shape[1]):
            y[r, offset + c] = x[r, c]


def _concat_copy_out(dx, dy, offset):
    """dx = dy[:, offset : offset + dx.shape[1]], for dy (R, Cy), dx (R, Cx). Writes dx."""
    check_rows(dy, dx, offset, dx.shape[1], "concat_copy_out")
    for r in prange(dx.shape[0]):
        for c in range(dx.shape[1]):
            dx[r, c] = dy[r, offset + c]


concat_copy_in = njit(cache=True)(_concat_copy_in)
concat_copy_out = njit(cache=True)(_concat_copy_out)
