"""Pooling kernels against a NumPy reference, plus adjointness of the backward passes."""

import numpy as np
import pytest
from kernel_testutil import assert_adjoint, assert_close64

from nnmem.kernels.cpu import (
    avgpool2d_backward,
    avgpool2d_forward,
    maxpool2d_backward,
    maxpool2d_forward,
)
from nnmem.kernels.sizes import pool2d_output_shape

# (n, c, h, w, kh, kw, sh, sw, ph, pw)
SHAPES = [
    (2, 3, 6, 6, 2, 2, 2, 2, 0, 0),  # the classic 2x2/2
    (1, 2, 7, 5, 3, 3, 2, 2, 1, 1),  # batch 1, odd sizes, padding 1
    (2, 1, 5, 8, 3, 2, 1, 2, 2, 1),  # non-square window, padding 2 (< kh)
    (1, 2, 4, 4, 4, 4, 1, 1, 0, 0),  # global pooling
]


def _padded(x, ph, pw, value):
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def ref_maxpool(x, kh, kw, sh, sw, ph, pw):
    """Loop reference: padding is -inf; first maximum in row-major window order wins."""
    n, c, h, w = x.shape
    _, _, oh, ow = pool2d_output_shape(n, c, h, w, kh, kw, sh, sw, ph, pw)
    xp = _padded(x, ph, pw, -np.inf)
    y = np.empty((n, c, oh, ow))
    arg = np.empty((n, c, oh, ow), np.int32)
    for b in range(n):
        for ci in range(c):
            for i in range(oh):
                for j in range(ow):
                    win = xp[b, ci, i * sh : i * sh + kh, j * sw : j * sw + kw]
                    k = int(np.argmax(win))  # first occurrence
                    p, q = divmod(k, kw)
                    y[b, ci, i, j] = win[p, q]
                    arg[b, ci, i, j] = (i * sh + p - ph) * w + (j * sw + q - pw)
    return y, arg


def ref_avgpool(x, kh, kw, sh, sw, ph, pw):
    n, c, h, w = x.shape
    _, _, oh, ow = pool2d_output_shape(n, c, h, w, kh, kw, sh, sw, ph, pw)
    xp = _padded(x, ph, pw, 0.0)
    y = np.zeros((n, c, oh, ow))
    for p in range(kh):
        for q in range(kw):
            y += xp[:, :, p : p + sh * (oh - 1) + 1 : sh, q : q + sw * (ow - 1) + 1 : sw]
    return y / (kh * kw)


def _case(rng, shape, dtype=np.float64):
    n, c, h, w, kh, kw, sh, sw, ph, pw = shape
    ysh = pool2d_output_shape(n, c, h, w, kh, kw, sh, sw, ph, pw)
    return (
        rng.standard_normal((n, c, h, w)).astype(dtype),
        rng.standard_normal(ysh).astype(dtype),
        shape[4:],
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_maxpool_forward_and_adjoint(rng, shape):
    x, dy, win = _case(rng, shape)
    y_ref, arg_ref = ref_maxpool(x, *win)
    y = np.full(dy.shape, np.nan)
    arg = np.full(dy.shape, -7, np.int32)
    maxpool2d_forward(y, arg, x, *win)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(arg, arg_ref)
    dx = np.full(x.shape, np.nan)
    maxpool2d_backward(dx, dy, arg, *win)
    # the backward is the transpose of the gather x -> x[n, c].flat[argmax]
    n, c = x.shape[:2]
    gather = np.take_along_axis(x.reshape(n, c, -1), arg.reshape(n, c, -1), axis=2)
    assert_adjoint(dy, gather, dx, x)
    expect = np.zeros_like(x).reshape(n, c, -1)
    for b in range(n):
        for ci in range(c):
            np.add.at(expect[b, ci], arg[b, ci].ravel(), dy[b, ci].ravel())
    assert_close64(dx, expect.reshape(x.shape))


def test_maxpool_ties_pick_first_in_row_major_order():
    x = np.array([[[[1.0, 3.0, 3.0], [3.0, 0.0, 3.0], [2.0, 3.0, 1.0]]]])
    y = np.empty((1, 1, 2, 2))
    arg = np.empty((1, 1, 2, 2), np.int32)
    maxpool2d_forward(y, arg, x, 2, 2, 1, 1, 0, 0)
    np.testing.assert_array_equal(y[0, 0], [[3.0, 3.0], [3.0, 3.0]])
    np.testing.assert_array_equal(arg[0, 0], [[1, 1], [3, 5]])


def test_maxpool_2x2_stride_2_ties_and_nan_as_the_general_loops():
    """2x2 windows with stride 2 run written out (pool.py's max_2x2): ties pick the first in
    row-major order, a NaN wins only where it is first (every later comparison with it is
    false), and an odd row or column past the last window is never read."""
    nan = np.nan
    x = np.array([[[[1.0, 3.0, 2.0, 2.0, 9.0],
                    [3.0, 3.0, 2.0, 2.0, 9.0],
                    [nan, 0.0, 0.0, nan, 9.0],
                    [5.0, 1.0, 0.0, 7.0, 9.0],
                    [9.0, 9.0, 9.0, 9.0, 9.0]]]])  # fmt: skip
    y = np.empty((1, 1, 2, 2))
    arg = np.empty((1, 1, 2, 2), np.int32)
    maxpool2d_forward(y, arg, x, 2, 2, 2, 2, 0, 0)
    np.testing.assert_array_equal(y[0, 0], [[3.0, 2.0], [nan, 7.0]])
    np.testing.assert_array_equal(arg[0, 0], [[1, 2], [10, 18]])


def test_maxpool_never_picks_padding():
    x = -np.ones((1, 1, 3, 3)) * 5.0  # all negative: a 0 in the padding would win if padding were 0
    y = np.empty((1, 1, 2, 2))
    arg = np.empty((1, 1, 2, 2), np.int32)
    maxpool2d_forward(y, arg, x, 2, 2, 2, 2, 1, 1)
    assert np.all(y == -5.0)
    assert np.all((arg >= 0) & (arg < 9))


@pytest.mark.parametrize("shape", SHAPES)
def test_avgpool_forward_and_adjoint(rng, shape):
    x, dy, win = _case(rng, shape)
    y = np.full(dy.shape, np.nan)
    avgpool2d_forward(y, x, *win)
    assert_close64(y, ref_avgpool(x, *win))
    dx = np.full(x.shape, np.nan)
    avgpool2d_backward(dx, dy, *win)
    assert_adjoint(dy, y, dx, x)


def test_padding_must_be_smaller_than_window():
    with pytest.raises(ValueError, match="padding must be smaller"):
        pool2d_output_shape(1, 1, 4, 4, 2, 2, 2, 2, 2, 0)
    x = np.zeros((1, 1, 4, 4))
    with pytest.raises(ValueError, match="padding must satisfy"):
        maxpool2d_forward(
            np.empty((1, 1, 4, 4)), np.empty((1, 1, 4, 4), np.int32), x, 2, 2, 2, 2, 2, 2
        )
    with pytest.raises(ValueError, match="padding must satisfy"):
        avgpool2d_forward(np.empty((1, 1, 4, 4)), x, 2, 2, 2, 2, 0, 2)


def test_float32(rng):
    x, dy, win = _case(rng, SHAPES[1], np.float32)
    y = np.empty(dy.shape, np.float32)
    arg = np.empty(dy.shape, np.int32)
    maxpool2d_forward(y, arg, x, *win)
    y_ref, arg_ref = ref_maxpool(x.astype(np.float64), *win)
    np.testing.assert_array_equal(y, y_ref.astype(np.float32))
    np.testing.assert_array_equal(arg, arg_ref)
    dx = np.empty(x.shape, np.float32)
    maxpool2d_backward(dx, dy, arg, *win)
    avgpool2d_forward(y, x, *win)
    np.testing.assert_allclose(y, ref_avgpool(x.astype(np.float64), *win), rtol=1e-5, atol=1e-6)
    avgpool2d_backward(dx, dy, *win)
    assert dx.dtype == np.float32 and np.isfinite(dx).all()
