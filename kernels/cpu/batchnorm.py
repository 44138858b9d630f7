"""Batch normalisation over the channels of an NCHW tensor (statistics over N, H, W).

Training forward (m = N*H*W elements per channel):
    mean = sum(x)/m,  var = sum((x-mean)^2)/m  (biased, used to normalise),
    invstd = 1/sqrt(var + eps),  y = gamma*(x-mean)*invstd + beta,
    running_mean = momentum*running_mean + (1-momentum)*mean
    running_var  = momentum*running_var  + (1-momentum)*var*m/(m-1)   (unbiased)
(SINGA's convention: momentum weights the OLD running value.)

Every kernel runs in parallel over channels; each channel's sums are taken in a
fixed order with float64 accumulators (four chains, see _channel_sum), so results are
deterministic.
Per-channel vectors (gamma, beta, saved_*, running_*) have shape (C,). No kernel
allocates or needs a workspace.
"""

import math

from numba import prange

from ._jit import njit


def _check_bn(y, x, c_vec):
    if y.shape != x.shape or c_vec.shape[0] != x.shape[1]:
        raise ValueError(
            "batchnorm2d: y must match x (N,C,H,W) and per-channel vectors must have length C"
        )


check_bn = njit(cache=True)(_check_bn)


# The sums of a channel: four float64 accumulators, each taking every fourth element of a
# row, added in a fixed order at the end. One accumulator makes every addition wait for the
# previous one (a float64 add takes about four cycles: a 32,768-element channel was
# latency-bound, 2-3 times slower than memory); four independent chains fill the adder and
# let LLVM use vector registers. Deterministic: the order depends on the shape only.


def _channel_sum(x, ci):
    """sum of x[:, ci] (float64)."""
    n, c, h, w = x.shape
    s0 = s1 = s2 = s3 = 0.0
    for b in range(n):
        for u in range(h):
            v = 0
            while v + 4 <= w:
                s0 += x[b, ci, u, v]
                s1 += x[b, ci, u, v + 1]
                s2 += x[b, ci, u, v + 2]
                s3 += x[b, ci, u, v + 3]
                v += 4
            while v < w:
                s0 += x[b, ci, u, v]
                v += 1
    return (s0 + s1) + (s2 + s3)


def _channel_squared_deviations(x, ci, mean):
    """sum of (x[:, ci] - mean)^2 (float64)."""
    n, c, h, w = x.shape
    s0 = s1 = s2 = s3 = 0.0
    for b in range(n):
        for u in range(h):
            v = 0
            while v + 4 <= w:
                d0 = x[b, ci, u, v] - mean
                d1 = x[b, ci, u, v + 1] - mean
                d2 = x[b, ci, u, v + 2] - mean
                d3 = x[b, ci, u, v + 3] - mean
                s0 += d0 * d0
                s1 += d1 * d1
                s2 += d2 * d2
                s3 += d3 * d3
                v += 4
            while v < w:
                d0 = x[b, ci, u, v] - mean
                s0 += d0 * d0
                v += 1
    return (s0 + s1) + (s2 + s3)


def _channel_gradient_sums(dy, x, ci, mean, invstd):
    """(sum of dy[:, ci], sum of dy[:, ci] * xhat) with xhat = (x - mean) * invstd."""
    n, c, h, w = x.shape
    g0 = g1 = g2 = g3 = 0.0
    p0 = p1 = p2 = p3 = 0.0
    for b in range(n):
        for u in range(h):
            v = 0
            while v + 4 <= w:
                a0 = dy[b, ci, u, v]
                a1 = dy[b, ci, u, v + 1]
                a2 = dy[b, ci, u, v + 2]
                a3 = dy[b, ci, u, v + 3]
                g0 += a0
                g1 += a1
                g2 += a2
                g3 += a3
                p0 += a0 * ((x[b, ci, u, v] - mean) * invstd)
                p1 += a1 * ((x[b, ci, u, v + 1] - mean) * invstd)
                p2 += a2 * ((x[b, ci, u, v + 2] - mean) * invstd)
                p3 += a3 * ((x[b, ci, u, v + 3] - mean) * invstd)
                v += 4
            while v < w:
                a0 = dy[b, ci, u, v]
                g0 += a0
                p0 += a0 * ((x[b, ci, u, v] - mean) * invstd)
                v += 1
    return (g0 + g1) + (g2 + g3), (p0 + p1) + (p2 + p3)


channel_sum = njit(cache=True)(_channel_sum)
channel_squared_deviations = njit(cache=True)(_channel_squared_deviations)
channel_gradient_sums = njit(cache=True)(_channel_gradient_sums)


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
        var = channel_squared_deviations(x, ci, mean) / m
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
        sdy, sdyx = channel_gradient_sums(dy, x, ci, mean, invstd)
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
