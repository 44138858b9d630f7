"""Elementwise, bias and reduction kernels against NumPy, including in-place use."""

import numpy as np
import pytest
from kernel_testutil import assert_close64

from nnmem.kernels import counter_rng
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
    increment,
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


def _uniforms(seed, counter, n):
    """counter_uniform's definition, spelt out with the reference splitmix64 (plain Python)."""
    s = np.uint64
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps on purpose
        key = counter_rng.splitmix64(s(seed) + counter_rng.splitmix64(s(counter)))
        return np.array([float(counter_rng.splitmix64(key + s(i)) >> s(40)) * 2.0**-24
                         for i in range(n)])  # fmt: skip


def test_dropout_draws_counter_based_masks(rng):
    x = rng.standard_normal(N)
    mask, y, state = np.empty(N), np.empty(N), np.array([5], np.int64)
    dropout_forward(y, mask, state, x, 0.4, 1234)
    expect_mask = np.where(_uniforms(1234, 5, N) < 0.4, 0.0, 1.0 / 0.6)
    np.testing.assert_array_equal(mask, expect_mask)
    assert_close64(y, x * expect_mask)
    assert state[0] == 6  # the next draw is another one
    dropout_forward(y, mask, state, x, 0.4, 1234)
    assert not np.array_equal(mask, expect_mask)
    np.testing.assert_array_equal(mask, np.where(_uniforms(1234, 6, N) < 0.4, 0.0, 1.0 / 0.6))
    dy = rng.standard_normal(N)
    dx = np.empty(N)
    dropout_backward(dx, dy, mask)
    assert_close64(dx, dy * mask)
    xi = x.copy()
    dropout_forward(xi, mask, state, xi, 0.0, 1)  # ratio 0: identity, in place
    np.testing.assert_array_equal(xi, x)
    dropout_forward(y, mask, state, x, 1.0, 1)  # ratio 1: everything dropped, no inf
    assert np.all(y == 0) and np.all(mask == 0)


def test_counter_uniforms_are_uniform():
    """A million draws: the mean and the share below 0.3 are within 5 standard errors."""
    x = np.ones(1 << 20, np.float32)
    y, mask = np.empty_like(x), np.empty_like(x)
    dropout_forward(y, mask, np.zeros(1, np.int64), x, 0.3, 2**63 - 1)
    dropped = (mask == 0).mean()
    assert abs(dropped - 0.3) < 5 * np.sqrt(0.3 * 0.7 / x.size)


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
    dropout_forward(y, mask, np.zeros(1, np.int64), x, 0.5, 7)
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


def test_increment_counts_in_place():
    for dtype in (np.int32, np.int64):
        counter = np.array([41], dtype)
        increment(counter)
        increment(counter)
        assert counter.dtype == dtype and counter[0] == 43
