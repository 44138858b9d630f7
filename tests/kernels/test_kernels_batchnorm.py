"""Batch normalisation kernels against a NumPy reference and finite differences."""

import numpy as np
import pytest
from kernel_testutil import assert_close64

from nnmem.kernels import cpu as K
from nnmem.kernels.cpu import (
    batchnorm2d_backward,
    batchnorm2d_forward_infer,
    batchnorm2d_forward_train,
)

SHAPES = [(2, 3, 4, 5), (1, 2, 3, 3), (4, 1, 1, 1)]


def ref_train(x, gamma, beta, rm, rv, momentum, eps):
    m = x.shape[0] * x.shape[2] * x.shape[3]
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    invstd = 1.0 / np.sqrt(var + eps)
    bc = (None, slice(None), None, None)
    y = gamma[bc] * (x - mean[bc]) * invstd[bc] + beta[bc]
    rm2 = momentum * rm + (1 - momentum) * mean
    rv2 = momentum * rv + (1 - momentum) * var * m / (m - 1)
    return y, mean, invstd, rm2, rv2


def _params(rng, c, dtype=np.float64):
    gamma = rng.uniform(0.5, 1.5, c).astype(dtype)
    beta = rng.standard_normal(c).astype(dtype)
    rm = rng.standard_normal(c).astype(dtype)
    rv = rng.uniform(0.5, 2.0, c).astype(dtype)
    return gamma, beta, rm, rv


def _train(x, gamma, beta, rm, rv, momentum=0.9, eps=1e-5):
    c = x.shape[1]
    y = np.empty_like(x)
    mean = np.empty(c, x.dtype)
    invstd = np.empty(c, x.dtype)
    batchnorm2d_forward_train(y, mean, invstd, rm, rv, x, gamma, beta, momentum, eps)
    return y, mean, invstd


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_forward_train(rng, shape):
    x = rng.standard_normal(shape) * 3 + 10  # large mean: tests the two-pass variance
    gamma, beta, rm, rv = _params(rng, shape[1])
    y_ref, mean_ref, inv_ref, rm_ref, rv_ref = ref_train(x, gamma, beta, rm, rv, 0.9, 1e-5)
    y, mean, invstd = _train(x, gamma, beta, rm, rv)
    assert_close64(y, y_ref, atol=1e-11)
    assert_close64(mean, mean_ref)
    assert_close64(invstd, inv_ref)
    assert_close64(rm, rm_ref)
    assert_close64(rv, rv_ref)


def test_forward_infer(rng):
    x = rng.standard_normal((2, 3, 4, 5))
    gamma, beta, rm, rv = _params(rng, 3)
    bc = (None, slice(None), None, None)
    expect = gamma[bc] * (x - rm[bc]) / np.sqrt(rv[bc] + 1e-5) + beta[bc]
    y = np.empty_like(x)
    batchnorm2d_forward_infer(y, x, gamma, beta, rm, rv, 1e-5)
    assert_close64(y, expect)
    batchnorm2d_forward_infer(x, x, gamma, beta, rm, rv, 1e-5)  # in place
    assert_close64(x, expect)


@pytest.mark.parametrize("shape", SHAPES)
def test_backward_matches_finite_differences(rng, shape):
    x = rng.standard_normal(shape)
    c = shape[1]
    gamma, beta, rm, rv = _params(rng, c)
    dy = rng.standard_normal(shape)
    eps = 1e-3

    def loss(x_, g_, b_):
        y, _, _ = _train(x_, g_, b_, rm.copy(), rv.copy(), eps=eps)
        return float(np.sum(y * dy))

    _, mean, invstd = _train(x, gamma, beta, rm.copy(), rv.copy(), eps=eps)
    dx = np.full(shape, np.nan)
    dgamma = np.full(c, np.nan)
    dbeta = np.full(c, np.nan)
    batchnorm2d_backward(dx, dgamma, dbeta, dy, x, gamma, mean, invstd)

    h = 1e-6
    for arr, grad in ((x, dx), (gamma, dgamma), (beta, dbeta)):
        num = np.empty_like(arr)
        for i in range(arr.size):
            flat = arr.reshape(-1)
            old = flat[i]
            flat[i] = old + h
            up = loss(x, gamma, beta)
            flat[i] = old - h
            down = loss(x, gamma, beta)
            flat[i] = old
            num.reshape(-1)[i] = (up - down) / (2 * h)
        np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-7)


def test_float32(rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    gamma, beta, rm, rv = _params(rng, 3, np.float32)
    rm64, rv64 = rm.astype(np.float64), rv.astype(np.float64)
    y_ref, _, _, rm_ref, rv_ref = ref_train(
        x.astype(np.float64),
        gamma.astype(np.float64),
        beta.astype(np.float64),
        rm64,
        rv64,
        0.9,
        1e-5,
    )
    y, mean, invstd = _train(x, gamma, beta, rm, rv)
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rv, rv_ref, rtol=1e-5)
    dx = np.empty_like(x)
    dg = np.empty(3, np.float32)
    db = np.empty(3, np.float32)
    batchnorm2d_backward(dx, dg, db, x, x, gamma, mean, invstd)
    batchnorm2d_forward_infer(y, x, gamma, beta, rm, rv, 1e-5)
    assert y.dtype == np.float32 and np.isfinite(dx).all()


def test_shape_mismatch_raises():
    x = np.zeros((2, 3, 2, 2))
    with pytest.raises(ValueError, match="per-channel vectors"):
        batchnorm2d_forward_infer(
            np.empty_like(x), x, np.ones(2), np.ones(3), np.ones(3), np.ones(3), 1e-5
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_apply_reproduces_the_training_forward_bit_for_bit(dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 5, 6)).astype(dtype)
    gamma, beta = rng.standard_normal(4).astype(dtype), rng.standard_normal(4).astype(dtype)
    y, mean, invstd = np.empty_like(x), np.empty(4), np.empty(4)  # float64 statistics
    rm, rv = np.zeros(4, dtype), np.ones(4, dtype)
    K.batchnorm2d_forward_train(y, mean, invstd, rm, rv, x, gamma, beta, 0.9, 1e-5)
    rm_before, rv_before = rm.copy(), rv.copy()
    again = np.empty_like(x)
    K.batchnorm2d_forward_apply(again, x, gamma, beta, mean, invstd)
    np.testing.assert_array_equal(again, y)
    np.testing.assert_array_equal(rm, rm_before)
    np.testing.assert_array_equal(rv, rv_before)
