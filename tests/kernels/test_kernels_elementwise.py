"""Elementwise, bias and reduction kernels against NumPy, including in-place use."""

import numpy as np
import pytest
from kernel_testutil import assert_close64

from nnmem.kernels.cpu import (
    add,
    add_bias_nchw,
    add_bias_rows,
    axpy,
    bias_grad_nchw,
    copy,
    dropout_backward,
    dropout_forward,
    fill,
    mul,
    relu_backward,
    relu_forward,
    scale,
    sigmoid_backward,
    sigmoid_forward,
    sub,
    sum_rows,
)

N = 37  # odd length


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_relu_and_in_place(rng):
    x = rng.standard_normal(N)
    dy = rng.standard_normal(N)
    y = np.empty(N)
    relu_forward(y, x)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    xi = x.copy()
    relu_forward(xi, xi)  # in place: the backward must still work from the output
    np.testing.assert_array_equal(xi, y)
    dx = np.empty(N)
    relu_backward(dx, dy, xi)
    np.testing.assert_array_equal(dx, dy * (x > 0))
    relu_backward(dy, dy, xi)  # in place on the gradient
    np.testing.assert_array_equal(dy, dx)


def test_sigmoid_stable_and_in_place(rng):
    x = np.concatenate([rng.standard_normal(N) * 4, [-800.0, 800.0, 0.0]])
    y = np.empty_like(x)
    sigmoid_forward(y, x)
    with np.errstate(over="ignore"):
        assert_close64(y, _sigmoid(x))
    assert np.isfinite(y).all() and y[-3] == 0.0 and y[-2] == 1.0 and y[-1] == 0.5
    dy = rng.standard_normal(x.size)
    dx = np.empty_like(x)
    sigmoid_backward(dx, dy, y)
    assert_close64(dx, dy * y * (1 - y))
    sigmoid_forward(x, x)
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("kernel, op", [(add, np.add), (sub, np.subtract), (mul, np.multiply)])
def test_binary_ops_and_in_place(rng, kernel, op):
    a = rng.standard_normal(N)
    b = rng.standard_normal(N)
    out = np.empty(N)
    kernel(out, a, b)
    np.testing.assert_array_equal(out, op(a, b))
    a2 = a.copy()
    kernel(a2, a2, b)  # out is the first input
    np.testing.assert_array_equal(a2, op(a, b))
    b2 = b.copy()
    kernel(b2, a, b2)  # out is the second input
    np.testing.assert_array_equal(b2, op(a, b))
    with pytest.raises(ValueError, match="same number of elements"):
        kernel(out, a, b[:-1])


def test_axpy_scale_fill_copy(rng):
    x = rng.standard_normal(N)
    y = rng.standard_normal(N)
    expect = y + 0.3 * x
    axpy(y, 0.3, x)
    assert_close64(y, expect)
    scale(y, -2.0)
    assert_close64(y, -2.0 * expect)
    fill(y, 1.5)
    assert np.all(y == 1.5)
    copy(y, x)
    np.testing.assert_array_equal(y, x)


def test_dropout(rng):
    x = rng.standard_normal(N)
    u = rng.uniform(size=N)
    mask = u.copy()
    y = np.empty(N)
    dropout_forward(y, mask, x, 0.4)
    expect_mask = np.where(u < 0.4, 0.0, 1.0 / 0.6)
    assert_close64(mask, expect_mask)
    assert_close64(y, x * expect_mask)
    dy = rng.standard_normal(N)
    dx = np.empty(N)
    dropout_backward(dx, dy, mask)
    assert_close64(dx, dy * expect_mask)
    mask = u.copy()
    xi = x.copy()
    dropout_forward(xi, mask, xi, 0.0)  # ratio 0: identity, in place
    np.testing.assert_array_equal(xi, x)
    mask = u.copy()
    dropout_forward(y, mask, x, 1.0)  # ratio 1: everything dropped, no inf
    assert np.all(y == 0) and np.all(mask == 0)


def test_bias_add_and_grad(rng):
    y = rng.standard_normal((5, 7))
    b = rng.standard_normal(7)
    expect = y + b
    add_bias_rows(y, b)
    assert_close64(y, expect)
    out = np.full(7, np.nan)
    sum_rows(out, y)
    assert_close64(out, y.sum(axis=0))
    y4 = rng.standard_normal((3, 4, 2, 5))
    b4 = rng.standard_normal(4)
    expect4 = y4 + b4[None, :, None, None]
    add_bias_nchw(y4, b4)
    assert_close64(y4, expect4)
    db = np.full(4, np.nan)
    bias_grad_nchw(db, y4)
    assert_close64(db, y4.sum(axis=(0, 2, 3)))
    with pytest.raises(ValueError, match="b.shape"):
        add_bias_rows(y, b[:-1])


def test_float32(rng):
    x = rng.standard_normal(N).astype(np.float32)
    y = np.empty(N, np.float32)
    relu_forward(y, x)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    relu_backward(y, x, y)
    sigmoid_forward(y, x)
    np.testing.assert_allclose(y, _sigmoid(x.astype(np.float64)), rtol=1e-6)
    sigmoid_backward(y, x, y)
    add(y, x, x)
    np.testing.assert_array_equal(y, x + x)
    sub(y, x, x)
    mul(y, x, x)
    np.testing.assert_array_equal(y, x * x)
    axpy(y, 0.5, x)
    scale(y, 2.0)
    fill(y, 0.25)
    copy(y, x)
    mask = np.linspace(0, 1, N, endpoint=False).astype(np.float32)
    dropout_forward(y, mask, x, 0.5)
    dropout_backward(y, x, mask)
    y2 = rng.standard_normal((4, 6)).astype(np.float32)
    b = np.ones(6, np.float32)
    add_bias_rows(y2, b)
    out = np.empty(6, np.float32)
    sum_rows(out, y2)
    np.testing.assert_allclose(out, y2.astype(np.float64).sum(0), rtol=1e-6)
    y4 = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    add_bias_nchw(y4, b[:3])
    db = np.empty(3, np.float32)
    bias_grad_nchw(db, y4)
    np.testing.assert_allclose(db, y4.astype(np.float64).sum((0, 2, 3)), rtol=1e-6)
    assert y.dtype == np.float32
