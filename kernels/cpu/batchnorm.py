"""Batch normalisation over the channels of an NCHW tensor (statistics over N, H, W).

Training forward (m = N*H*W elements per channel):
    mean = sum(x)/m,  var = sum((x-mean)^2)/m  (biased, used to normalise),
    invstd = 1/sqrt(var + eps),  y = gamma*(x-mean)*invstd + beta,
    running_mean = momentum*running_mean + (1-momentum)*mean
    running_var  = momentum*running_var  + (1-momentum)*var*m/(m-1)   (unbiased)
(SINGA's convention: momentum weights the OLD running value.)

Every kernel runs in parallel over channels; each channel's sums are taken in a
fixed (n, h, w) order with float64 accumulators, so results are deterministic.
Per-channel vectors (gamma, beta, saved_*, running_*) have shape (C,). No kernel
allocates or needs a workspace.
"""

import math

from numba import prange

from ._jit import njit

__all__ = [
    "batchnorm2d_forward_train",
    "batchnorm2d_forward_apply",
    "batchnorm2d_forward_infer",
    "batchnorm2d_backward",
]


def _check_bn(y, x, c_vec):
    if y.shape != x.shape or c_vec.shape[0] != x.shape[1]:
        raise ValueError(
            "batchnorm2d: y must match x (N,C,H,W) and per-channel vectors must have length C"
        )


check_bn = njit(cache=True)(_check_bn)


def _channel_sum(x, ci):
    s = 0.0
    n, c, h, w = x.shape
    for b in range(n):
        for u in range(h):
            for v in range(w):
                s += x[b, ci, u, v]
    return s


channel_sum = njit(cache=True)(_channel_sum)


def _batchnorm2d_forward_train(
    y, saved_mean, saved_invstd, running_mean, running_var, x, gamma, beta, momentum, eps
):
    """y = gamma*(x-mean)*invstd + beta with batch stats; writes y, saved_mean, saved_invstd;
    updates running_* in place."""
    check_bn(y, x, gamma)
    check_bn(y, x, beta)
    check_bn(y, x, saved_mean)
    check_bn(y, x, saved_invstd)
    check_bn(y, x, running_mean)
    check_bn(y, x, running_var)
    n, c, h, w = x.shape
    m = n * h * w
    for ci in prange(c):
        mean = channel_sum(x, ci) / m
        sq = 0.0
        for b in range(n):
            for u in range(h):
                for v in range(w):
                    d = x[b, ci, u, v] - mean
                    sq += d * d
        var = sq / m
        invstd = 1.0 / math.sqrt(var + eps)
        scale = gamma[ci] * invstd
        shift = beta[ci]
        for b in range(n):
            for u in range(h):
                for v in range(w):
                    y[b, ci, u, v] = (x[b, ci, u, v] - mean) * scale + shift
        saved_mean[ci] = mean
        saved_invstd[ci] = invstd
        unbiased = var * m / (m - 1) if m > 1 else var
        running_mean[ci] = momentum * running_mean[ci] + (1.0 - momentum) * mean
        running_var[ci] = momentum * running_var[ci] + (1.0 - momentum) * unbiased


def _batchnorm2d_forward_apply(y, x, gamma, beta, saved_mean, saved_invstd):
    """y = (x - mean) * (gamma*invstd) + beta with the statistics a training forward saved.

    Recomputation uses it: the arithmetic is the training forward's, step for step, so with
    float64 saved statistics it reproduces that forward's y bit for bit, and it leaves the
    running statistics alone (they were updated once, by the real forward)."""
    check_bn(y, x, gamma)
    n, c, h, w = x.shape
    for ci in prange(c):
        mean = saved_mean[ci]
        scale = gamma[ci] * saved_invstd[ci]
        shift = beta[ci]
        for b in range(n):
            for u in range(h):
                for v in range(w):
                    y[b, ci, u, v] = (x[b, ci, u, v] - mean) * scale + shift


def _batchnorm2d_forward_infer(y, x, gamma, beta, running_mean, running_var, eps):
    """y = gamma*(x-running_mean)/sqrt(running_var+eps) + beta.
    Writes y; in-place safe (y may be x)."""
    check_bn(y, x, gamma)
    check_bn(y, x, beta)
    check_bn(y, x, running_mean)
    check_bn(y, x, running_var)
    n, c, h, w = x.shape
    for ci in prange(c):
        scale = gamma[ci] / math.sqrt(running_var[ci] + eps)
        mean = running_mean[ci]
        shift = beta[ci]
        for b in range(n):
            for u in range(h):
                for v in range(w):
                    y[b, ci, u, v] = (x[b, ci, u, v] - mean) * scale + shift


def _batchnorm2d_backward(dx, dgamma, dbeta, dy, x, gamma, saved_mean, saved_invstd):
    """Training-mode gradient: xhat=(x-mean)*invstd, dbeta=sum dy, dgamma=sum dy*xhat,
    dx = gamma*invstd/m * (m*dy - dbeta - xhat*dgamma). Overwrites dx, dgamma, dbeta."""
    check_bn(dx, x, gamma)
    check_bn(dy, x, dgamma)
    check_bn(dy, x, dbeta)
    check_bn(dy, x, saved_mean)
    check_bn(dy, x, saved_invstd)
    n, c, h, w = x.shape
    m = n * h * w
    for ci in prange(c):
        mean = saved_mean[ci]
        invstd = saved_invstd[ci]
        sdy = 0.0
        sdyx = 0.0
        for b in range(n):
            for u in range(h):
                for v in range(w):
                    g = dy[b, ci, u, v]
                    sdy += g
                    sdyx += g * ((x[b, ci, u, v] - mean) * invstd)
        dbeta[ci] = sdy
        dgamma[ci] = sdyx
        k = gamma[ci] * invstd / m
        for b in range(n):
            for u in range(h):
                for v in range(w):
                    xhat = (x[b, ci, u, v] - mean) * invstd
                    dx[b, ci, u, v] = k * (m * dy[b, ci, u, v] - sdy - xhat * sdyx)


batchnorm2d_forward_train = njit(parallel=True, cache=True)(_batchnorm2d_forward_train)
batchnorm2d_forward_apply = njit(parallel=True, cache=True)(_batchnorm2d_forward_apply)
batchnorm2d_forward_infer = njit(parallel=True, cache=True)(_batchnorm2d_forward_infer)
batchnorm2d_backward = njit(parallel=True, cache=True)(_batchnorm2d_backward)
