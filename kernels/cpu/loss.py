"""Loss functions: softmax cross-entropy (class ids or target distributions) and mean squared error.

Every loss is averaged over the batch N = x.shape[0] and written into a 1-element
array ``loss``; the backward kernels take the upstream gradient the same way
(``dloss``, 1 element). The batch sum is a serial loop in row order (the arrays
are tiny: N x classes), so the loss is bit-identical on every call.

Softmax is numerically stable: each row subtracts its maximum before ``exp``, and
-log softmax[label] is evaluated as log(sum exp(x - max)) - (x[label] - max), so
log(0) is never taken. No kernel allocates or needs a workspace; ``prob`` / ``err``
are outputs of the forward kernel kept for the backward kernel.

Class ids are int32 or int64; one-hot or soft targets (N, C) are int32, int64, float32 or
float64 (SINGA's Model documentation fills an int32 tensor with one-hot rows), each promoted to
float64 where it enters the sums, so every dtype of the same labels gives the same numbers. The
CUDA twins (kernels/cuda/loss.py) take the same forms.
"""

import math

from ._jit import njit


def _check_labels(labels, c):
    """Return the first row whose label is outside [0, c), or -1 if all are valid."""
    for r in range(labels.shape[0]):
        if labels[r] < 0 or labels[r] >= c:
            return r
    return -1


def _softmax_row(prob, x, r):
    """prob[r] = softmax(x[r]); returns (row max, log of sum exp(x[r] - max))."""
    c = x.shape[1]
    mx = x[r, 0]
    for k in range(1, c):
        if x[r, k] > mx:
            mx = x[r, k]
    s = 0.0
    for k in range(c):
        e = math.exp(x[r, k] - mx)
        prob[r, k] = e
        s += e
    for k in range(c):
        prob[r, k] = prob[r, k] / s
    return mx, math.log(s)


check_labels = njit(cache=True)(_check_labels)
softmax_row = njit(cache=True)(_softmax_row)


def _sce_forward(loss, prob, x, labels):
    """loss[0] = mean_n -log softmax(x[n])[labels[n]]; writes prob (N,C) = softmax(x).
    Returns bad row or -1."""
    n, c = x.shape
    bad = check_labels(labels, c)
    if bad >= 0:
        return bad
    total = 0.0
    for r in range(n):
        mx, lse = softmax_row(prob, x, r)
        total += lse - (x[r, labels[r]] - mx)
    loss[0] = total / n
    return -1


def _sce_backward(dx, dloss, prob, labels):
    """dx = (prob - onehot(labels)) * dloss[0] / N. Writes dx (N,C); dx may be prob.
    Returns bad row or -1."""
    n, c = prob.shape
    bad = check_labels(labels, c)
    if bad >= 0:
        return bad
    g = dloss[0] / n
    for r in range(n):
        lab = labels[r]
        for k in range(c):
            onehot = 1.0 if k == lab else 0.0
            dx[r, k] = (prob[r, k] - onehot) * g
    return -1


_sce_forward_jit = njit(cache=True)(_sce_forward)
_sce_backward_jit = njit(cache=True)(_sce_backward)


def _raise_bad_label(name, labels, row, c):
    raise ValueError(f"{name}: label {int(labels[row])} at row {row} is out of range [0, {c})")


def softmax_cross_entropy_forward(loss, prob, x, labels):
    """loss[0] = mean_n -log softmax(x)[n, labels[n]], prob = softmax(x) (N,C).
    Writes loss, prob. ValueError on bad label."""
    if x.ndim != 2 or prob.shape != x.shape or labels.shape != (x.shape[0],) or loss.size != 1:
        raise ValueError(
            "softmax_cross_entropy_forward: need x, prob (N,C), labels (N,), loss (1,)"
        )
    bad = _sce_forward_jit(loss, prob, x, labels)
    if bad >= 0:
        _raise_bad_label("softmax_cross_entropy_forward", labels, bad, x.shape[1])


def softmax_cross_entropy_backward(dx, dloss, prob, labels):
    """dx = (prob - onehot(labels)) * dloss[0] / N. Writes dx (N,C). ValueError on bad label."""
    if prob.ndim != 2 or dx.shape != prob.shape or labels.shape != (prob.shape[0],):
        raise ValueError("softmax_cross_entropy_backward: need dx, prob (N,C), labels (N,)")
    bad = _sce_backward_jit(dx, dloss, prob, labels)
    if bad >= 0:
        _raise_bad_label("softmax_cross_entropy_backward", labels, bad, prob.shape[1])


def _softmax_cross_entropy_forward_onehot(loss, prob, x, t):
    """loss[0] = -sum_{n,c} t[n,c] log softmax(x)[n,c] / N; prob = softmax(x). Writes loss, prob."""
    if prob.shape != x.shape or t.shape != x.shape:
        raise ValueError("softmax_cross_entropy_forward_onehot: x, prob, t must all be (N,C)")
    n, c = x.shape
    total = 0.0
    for r in range(n):
        mx, lse = softmax_row(prob, x, r)
        for k in range(c):
            tk = t[r, k]
            if tk != 0:
                total -= tk * ((x[r, k] - mx) - lse)
    loss[0] = total / n


def _softmax_cross_entropy_backward_onehot(dx, dloss, prob, t):
    """dx = (prob * sum_c t - t) * dloss[0] / N. Writes dx (N,C); dx may be prob."""
    if prob.shape != t.shape or dx.shape != t.shape:
        raise ValueError("softmax_cross_entropy_backward_onehot: dx, prob, t must all be (N,C)")
    n, c = prob.shape
    g = dloss[0] / n
    for r in range(n):
        st = 0.0
        for k in range(c):
            st += t[r, k]
        for k in range(c):
            dx[r, k] = (prob[r, k] * st - t[r, k]) * g


def _mse_forward(loss, err, x, t):
    """err = x - t, loss[0] = 0.5 * sum(err^2) / N (N = x.shape[0]). Writes err (N,F) and loss."""
    if err.shape != x.shape or t.shape != x.shape:
        raise ValueError("mse_forward: x, t, err must all be (N,F)")
    n, f = x.shape
    total = 0.0
    for r in range(n):
        for k in range(f):
            d = x[r, k] - t[r, k]
            err[r, k] = d
            total += d * d
    loss[0] = 0.5 * total / n


def _mse_backward(dx, dloss, err):
    """dx = err * dloss[0] / N. Writes dx (N,F); dx may be err."""
    if dx.shape != err.shape:
        raise ValueError("mse_backward: dx and err must have the same shape")
    n, f = err.shape
    g = dloss[0] / n
    for r in range(n):
        for k in range(f):
            dx[r, k] = err[r, k] * g


softmax_cross_entropy_forward_onehot = njit(cache=True)(_softmax_cross_entropy_forward_onehot)
softmax_cross_entropy_backward_onehot = njit(cache=True)(_softmax_cross_entropy_backward_onehot)
mse_forward = njit(cache=True)(_mse_forward)
mse_backward = njit(cache=True)(_mse_backward)
