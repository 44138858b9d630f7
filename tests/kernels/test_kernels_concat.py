"""Concatenation kernels against np.concatenate, along every axis, viewed as 2-D."""

import math

import numpy as np
import pytest

from nnmem.kernels.cpu import concat_copy_in, concat_copy_out


@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_blocks_of_columns_make_a_concatenation(rng, axis):
    shapes = [(2, 3, 4, 5), (2, 3, 4, 5), (2, 3, 4, 5)]
    shapes[1] = shapes[1][:axis] + (1,) + shapes[1][axis + 1 :]
    shapes[2] = shapes[2][:axis] + (7,) + shapes[2][axis + 1 :]
    xs = [rng.standard_normal(s) for s in shapes]
    expect = np.concatenate(xs, axis=axis)
    rows = math.prod(expect.shape[:axis])
    y = np.full(expect.shape, np.nan)
    offset = 0
    for x in xs:
        concat_copy_in(y.reshape(rows, -1), x.reshape(rows, -1), offset)
        offset += x.reshape(rows, -1).shape[1]
    np.testing.assert_array_equal(y, expect)
    offset = 0
    for x in xs:
        dx = np.full(x.shape, np.nan)
        concat_copy_out(dx.reshape(rows, -1), y.reshape(rows, -1), offset)
        np.testing.assert_array_equal(dx, x)  # the gradient's block is the input's place
        offset += dx.reshape(rows, -1).shape[1]


def test_a_block_that_does_not_fit_is_refused():
    y, x = np.zeros((2, 5)), np.ones((2, 3))
    with pytest.raises(ValueError, match="does not fit"):
        concat_copy_in(y, x, 3)
    with pytest.raises(ValueError, match="does not fit"):
        concat_copy_out(x, np.zeros((3, 5)), 0)  # rows differ
