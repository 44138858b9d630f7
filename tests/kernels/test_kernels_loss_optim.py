"""Loss and optimiser kernels against NumPy references."""

import numpy as np
import pytest
from kernel_testutil import assert_close64

from nnmem.kernels.cpu import (
    adam_update,
    matmul,
    mse_backward,
    mse_forward,
    sgd_update,
    softmax_cross_entropy_backward,
    softmax_cross_entropy_backward_onehot,
    softmax_cross_entropy_forward,
    softmax_cross_entropy_forward_onehot,
)


def ref_log_softmax(x):
    z = x - x.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _sce(x, labels):
    loss = np.full(1, np.nan, x.dtype)
    prob = np.full(x.shape, np.nan, x.dtype)
    softmax_cross_entropy_forward(loss, prob, x, labels)
    return loss, prob


def test_softmax_cross_entropy(rng):
    x = rng.standard_normal((5, 4)) * 3
    labels = np.array([0, 3, 1, 1, 2], np.int64)
    loss, prob = _sce(x, labels)
    ls = ref_log_softmax(x)
    assert_close64(prob, np.exp(ls))
    assert_close64(loss[0], -ls[np.arange(5), labels].mean())
    dloss = np.array([2.0])
    dx = np.full(x.shape, np.nan)
    softmax_cross_entropy_backward(dx, dloss, prob, labels)
    onehot = np.eye(4)[labels]
    assert_close64(dx, (np.exp(ls) - onehot) * 2.0 / 5)
    # finite differences of the loss
    h = 1e-6
    for idx in [(0, 0), (1, 3), (4, 2)]:
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        num = (_sce(xp, labels)[0][0] - _sce(xm, labels)[0][0]) / (2 * h)
        assert abs(num - dx[idx] / 2.0) < 1e-7


def test_softmax_cross_entropy_extreme_logits():
    x = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 999.0]])
    labels = np.array([1, 2], np.int32)  # the very unlikely classes: -log p is huge, not inf
    loss, prob = _sce(x, labels)
    assert np.isfinite(loss).all() and np.isfinite(prob).all()
    assert_close64(loss[0], (2000.0 + 1.0 + np.log1p(np.exp(-1.0))) / 2)


def test_onehot_variant_matches_labels(rng):
    x = rng.standard_normal((6, 5))
    labels = rng.integers(0, 5, 6)
    loss, prob = _sce(x, labels)
    for dtype in (np.float64, np.int64):
        t = np.eye(5, dtype=dtype)[labels]
        loss2 = np.empty(1)
        prob2 = np.empty_like(x)
        softmax_cross_entropy_forward_onehot(loss2, prob2, x, t)
        assert_close64(loss2, loss)
        assert_close64(prob2, prob)
        dx = np.empty_like(x)
        dx2 = np.empty_like(x)
        dloss = np.array([0.5])
        softmax_cross_entropy_backward(dx, dloss, prob, labels)
        softmax_cross_entropy_backward_onehot(dx2, dloss, prob2, t)
        assert_close64(dx2, dx)
    # a soft target distribution: dx = (prob * sum(t) - t) / N
    t = rng.uniform(size=(6, 5))
    softmax_cross_entropy_forward_onehot(loss, prob, x, t)
    assert_close64(loss[0], -(t * ref_log_softmax(x)).sum() / 6)
    softmax_cross_entropy_backward_onehot(dx2, np.array([1.0]), prob, t)
    assert_close64(dx2, (prob * t.sum(1, keepdims=True) - t) / 6)


@pytest.mark.parametrize("bad", [-1, 4])
def test_label_out_of_range(bad):
    x = np.zeros((3, 4))
    labels = np.array([0, bad, 1])
    with pytest.raises(ValueError, match=rf"label {bad} at row 1 is out of range \[0, 4\)"):
        _sce(x, labels)
    with pytest.raises(ValueError, match="out of range"):
        softmax_cross_entropy_backward(np.empty((3, 4)), np.ones(1), np.zeros((3, 4)), labels)


def test_mse(rng):
    x = rng.standard_normal((4, 3))
    t = rng.standard_normal((4, 3))
    loss = np.empty(1)
    err = np.empty_like(x)
    mse_forward(loss, err, x, t)
    assert_close64(err, x - t)
    assert_close64(loss[0], 0.5 * ((x - t) ** 2).sum() / 4)
    dx = np.empty_like(x)
    mse_backward(dx, np.array([3.0]), err)
    assert_close64(dx, (x - t) * 3.0 / 4)


def test_loss_float32(rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 2])
    loss, prob = _sce(x, labels)
    ls = ref_log_softmax(x.astype(np.float64))
    np.testing.assert_allclose(loss[0], -ls[np.arange(4), labels].mean(), rtol=1e-6)
    dx = np.empty_like(x)
    softmax_cross_entropy_backward(dx, np.ones(1, np.float32), prob, labels)
    t = np.eye(3, dtype=np.float32)[labels]
    softmax_cross_entropy_forward_onehot(loss, prob, x, t)
    softmax_cross_entropy_backward_onehot(dx, np.ones(1, np.float32), prob, t)
    err = np.empty_like(x)
    mse_forward(loss, err, x, x * 2)
    np.testing.assert_allclose(loss[0], 0.5 * (x.astype(np.float64) ** 2).sum() / 4, rtol=1e-6)
    mse_backward(dx, np.ones(1, np.float32), err)
    assert dx.dtype == np.float32


# ---------------------------------------------------------------- optimisers
def ref_sgd(param, grad, buf, lr, momentum, dampening, wd, nesterov):
    g = grad + wd * param
    if momentum != 0:
        buf[:] = momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf.copy()
    param -= lr * g


@pytest.mark.parametrize(
    "momentum, dampening, wd, nesterov",
    [(0.0, 0.0, 0.0, False), (0.9, 0.0, 1e-4, False), (0.9, 0.1, 5e-4, True)],
)
def test_sgd(rng, momentum, dampening, wd, nesterov):
    p = rng.standard_normal(11)
    p_ref = p.copy()
    buf = np.zeros(11)
    buf_ref = buf.copy()
    for _ in range(3):
        g = rng.standard_normal(11)
        g_copy = g.copy()
        sgd_update(p, g, buf, 0.1, momentum, dampening, wd, nesterov)
        ref_sgd(p_ref, g, buf_ref, 0.1, momentum, dampening, wd, nesterov)
        np.testing.assert_array_equal(g, g_copy)  # grad untouched
        assert_close64(p, p_ref)
        assert_close64(buf, buf_ref)


def test_adam(rng):
    p = rng.standard_normal(9)
    p_ref = p.copy()
    m, v = np.zeros(9), np.zeros(9)
    m_ref, v_ref = m.copy(), v.copy()
    lr, b1, b2, eps, wd = 1e-2, 0.9, 0.999, 1e-8, 1e-3
    for step in range(1, 4):
        g = rng.standard_normal(9)
        adam_update(p, g, m, v, np.array([step - 1], np.int32), lr, b1, b2, eps, wd)
        gg = g + wd * p_ref
        m_ref = b1 * m_ref + (1 - b1) * gg
        v_ref = b2 * v_ref + (1 - b2) * gg * gg
        p_ref -= lr * (m_ref / (1 - b1**step)) / (np.sqrt(v_ref / (1 - b2**step)) + eps)
        assert_close64(p, p_ref)
        assert_close64(m, m_ref)
        assert_close64(v, v_ref)
    with pytest.raises(ValueError, match="must not be negative"):
        adam_update(p, g, m, v, np.array([-1], np.int32), lr, b1, b2, eps, wd)


def test_optim_float32(rng):
    p = rng.standard_normal(8).astype(np.float32)
    g = rng.standard_normal(8).astype(np.float32)
    buf = np.zeros(8, np.float32)
    sgd_update(p, g, buf, 0.1, 0.9, 0.0, 0.0, False)
    m, v = np.zeros(8, np.float32), np.zeros(8, np.float32)
    adam_update(p, g, m, v, np.zeros(1, np.int32), 1e-3, 0.9, 0.999, 1e-8, 0.0)
    assert p.dtype == np.float32 and np.isfinite(p).all()


def test_matmul(rng):
    a = rng.standard_normal((4, 3))
    b = rng.standard_normal((5, 3))
    out = np.empty((4, 5))
    matmul(out, a, b.T)  # transposed view as input
    assert_close64(out, a @ b.T)
    matmul(out, a, b, trans_b=True)  # the transpose by flag: the same product
    assert_close64(out, a @ b.T)
    out_t = np.empty((3, 3))
    matmul(out_t, a, a, trans_a=True)
    assert_close64(out_t, a.T @ a)
    with pytest.raises(TypeError, match="dtypes must match"):
        matmul(out.astype(np.float32), a, b.T)
