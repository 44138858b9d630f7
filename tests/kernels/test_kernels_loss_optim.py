"""Loss and optimiser kernels against NumPy references."""

import numpy as np
import pytest
from kernel_testutil import assert_close64

from nnmem.kernels.cpu import (
    adagrad_update,
    adam_update,
    matmul,
    mse_backward,
    mse_forward,
    rmsprop_update,
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
    avg, hist = np.zeros(8, np.float32), np.zeros(8, np.float32)
    rmsprop_update(p, g, avg, np.zeros(1, np.int32), LR, 0.9, 1e-8, 0.0)
    adagrad_update(p, g, hist, np.zeros(1, np.int32), LR, 1e-8, 0.0)
    assert p.dtype == np.float32 and np.isfinite(p).all()


def decayed(schedule, s):
    """A (init, rate, period, staircase) schedule's value after s steps, as SINGA computes it."""
    init, rate, period, staircase = schedule
    return init * rate ** ((s // period) if staircase else (s / period))


LR = (0.1, 0.5, 2.0, True)  # halved every 2 steps
RHO = (0.9, 0.95, 1.0, False)  # a schedule on a rate other than lr


def test_rmsprop(rng):
    p = rng.standard_normal(11)
    p_ref = p.copy()
    avg = np.zeros(11)
    avg_ref = avg.copy()
    eps, wd = 1e-6, 1e-3
    for s in range(5):
        g = rng.standard_normal(11)
        g_copy = g.copy()
        steps = np.array([s], np.int32)
        rmsprop_update(p, g, avg, steps, LR, RHO, eps, wd)
        gg = g + wd * p_ref
        rho = decayed(RHO, s)
        avg_ref = rho * avg_ref + (1 - rho) * gg * gg
        p_ref -= decayed(LR, s) * gg / np.sqrt(avg_ref + eps)
        np.testing.assert_array_equal(g, g_copy)  # grad untouched
        assert steps[0] == s  # the count is only read
        assert_close64(p, p_ref)
        assert_close64(avg, avg_ref)


def test_adagrad(rng):
    p = rng.standard_normal(10)
    p_ref = p.copy()
    hist = np.zeros(10)
    hist_ref = hist.copy()
    eps, wd = 1e-6, 1e-3
    for s in range(5):
        g = rng.standard_normal(10)
        g_copy = g.copy()
        adagrad_update(p, g, hist, np.array([s], np.int32), LR, eps, wd)
        gg = g + wd * p_ref
        hist_ref = hist_ref + gg * gg
        p_ref -= decayed(LR, s) * gg / np.sqrt(hist_ref + eps)
        np.testing.assert_array_equal(g, g_copy)
        assert_close64(p, p_ref)
        assert_close64(hist, hist_ref)


def test_sgd_and_adam_read_schedules_at_the_step_count(rng):
    p = rng.standard_normal(7)
    p_ref, p_adam, p_adam_ref = p.copy(), p.copy(), p.copy()
    buf, m, v = np.zeros(7), np.zeros(7), np.zeros(7)
    buf_ref, m_ref, v_ref = buf.copy(), m.copy(), v.copy()
    momentum = (0.9, 0.5, 3.0, False)
    for s in range(4):
        g = rng.standard_normal(7)
        steps = np.array([s], np.int32)
        sgd_update(p, g, buf, LR, momentum, 0.1, 0.0, False, steps)
        ref_sgd(p_ref, g, buf_ref, decayed(LR, s), decayed(momentum, s), 0.1, 0.0, False)
        assert_close64(p, p_ref)
        assert_close64(buf, buf_ref)
        adam_update(p_adam, g, m, v, steps, LR, RHO, 0.999, 1e-8, 0.0)
        b1 = decayed(RHO, s)
        m_ref = b1 * m_ref + (1 - b1) * g
        v_ref = 0.999 * v_ref + 0.001 * g * g
        c1, c2 = 1 - b1 ** (s + 1), 1 - 0.999 ** (s + 1)
        p_adam_ref -= decayed(LR, s) * (m_ref / c1) / (np.sqrt(v_ref / c2) + 1e-8)
        assert_close64(p_adam, p_adam_ref)


@pytest.mark.parametrize(
    "kernel, n_states, hyper",
    [
        (rmsprop_update, 1, [0.1, 0.9, 1e-8, 1e-3]),
        (adagrad_update, 1, [0.1, 1e-8, 1e-3]),
        (adam_update, 2, [0.1, 0.9, 0.999, 1e-8, 1e-3]),
    ],
)
def test_a_constant_schedule_is_the_number_exactly(rng, kernel, n_states, hyper):
    p, g = rng.standard_normal(6), rng.standard_normal(6)
    steps = np.array([123], np.int32)
    results = []
    for args in (hyper, [(h, 1.0, 7.0, False) for h in hyper]):
        q, states = p.copy(), [np.zeros(6) for _ in range(n_states)]
        kernel(q, g, *states, steps, *args)
        results.append([q, *states])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_the_step_count_is_checked(rng):
    p, g, avg = np.ones(3), np.ones(3), np.zeros(3)
    with pytest.raises(ValueError, match="must not be negative"):
        rmsprop_update(p, g, avg, np.array([-1], np.int32), LR, 0.9, 1e-8, 0.0)
    with pytest.raises(ValueError, match="one number"):
        adagrad_update(p, g, avg, np.zeros(2, np.int32), LR, 1e-8, 0.0)
    with pytest.raises(ValueError, match="same size"):
        adagrad_update(p, g, np.zeros(4), np.zeros(1, np.int32), 0.1, 1e-8, 0.0)
    np.testing.assert_array_equal(p, 1.0)


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
