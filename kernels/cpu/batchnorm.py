"""Batch normalisation over the channels of an NCHW tensor (statistics over N, H, W).

Training forward (m = N*H*W elements per channel):
    mean = sum(x)/m,  var = sum((x-mean)^2)/m  (biased, used to normalise),
    invstd = 1/sqrt(var + eps),  y = gamma*(x-mean)*invstd + beta,
    running_mean = momentum*running_mean + (1-momentum)*mean
    running_var  = momentum*running_var  + (1-momentum)*var*m/(m-1)   (unbiased)
(SINGA's convention: momentum weights the OLD running value.)

Every kernel runs in parallel over channels; each channel's sums are taken in a
fixed order with float64 accumulators (vectors of them, see _channel_sum), so results are
deterministic. x, y, dx and dy are C-contiguous (the planner's are): the loops run over whole
planes. Per-channel vectors (gamma, beta, saved_*, running_*) have shape (C,). No kernel
allocates or needs a workspace.
"""

import math

import numpy as np
from numba import prange

from ._jit import njit
from ._simd import lanes, vadd, vfma, vmul, vsplat, vsum, vwload

#: float64 lanes in one vector (8 with AVX-512): the vectors the sums are taken in.
WIDE = lanes(np.float64)


def _check_bn(y, x, c_vec):
    if y.shape != x.shape or c_vec.shape[0] != x.shape[1]:
        raise ValueError(
            "batchnorm2d: y must match x (N,C,H,W) and per-channel vectors must have length C"
        )


check_bn = njit(cache=True)(_check_bn)


# The sums of a channel, over its N planes of H*W values (x3 = x as (N, C, H*W)): float64
# vectors (_simd.py), two of them, each lane taking every (2 * lanes)-th value of a plane, the
# plane's last values (fewer than two vectors) into one scalar chain; at the end the two
# vectors are added, their lanes summed in a fixed tree (vsum), then the scalar chain. One
# accumulator makes every addition wait for the one before (a float64 add takes about four
# cycles: latency-bound, 2-3 times slower than memory); vectors of independent lanes fill
# the adder. Deterministic: the order depends on the shape and the CPU's vector width only.


def _channel_sum(x3, ci):
    """sum of x[:, ci] (float64)."""
    nl = WIDE
    a0 = a1 = vsplat(0.0)
    tail = 0.0
    for b in range(x3.shape[0]):
        row = x3[b, ci]
        v = 0
        while v + 2 * nl <= row.shape[0]:
            a0 = vadd(a0, vwload(row, v))
            a1 = vadd(a1, vwload(row, v + nl))
            v += 2 * nl
        for u in range(v, row.shape[0]):
            tail += row[u]
    return vsum(vadd(a0, a1)) + tail


def _channel_squared_deviations(x3, ci, mean):
    """sum of (x[:, ci] - mean)^2 (float64); the vector lanes add each square with one
    rounding (fma), the plane's tail with two."""
    nl = WIDE
    a0 = a1 = vsplat(0.0)
    tail = 0.0
    for b in range(x3.shape[0]):
        row = x3[b, ci]
        v = 0
        while v + 2 * nl <= row.shape[0]:
            d0 = vadd(vwload(row, v), -mean)
            d1 = vadd(vwload(row, v + nl), -mean)
            a0 = vfma(a0, d0, d0)
            a1 = vfma(a1, d1, d1)
            v += 2 * nl
        for u in range(v, row.shape[0]):
            d = row[u] - mean
            tail += d * d
    return vsum(vadd(a0, a1)) + tail


def _channel_gradient_sums(dy3, x3, ci, mean, invstd):
    """(sum of dy[:, ci], sum of dy[:, ci] * xhat) with xhat = (x - mean) * invstd, all in
    float64 (a caller may save the statistics in x's dtype)."""
    nl = WIDE
    mean, invstd = np.float64(mean), np.float64(invstd)
    g0 = g1 = p0 = p1 = vsplat(0.0)
    gt = pt = 0.0
    for b in range(x3.shape[0]):
        dyr, xr = dy3[b, ci], x3[b, ci]
        v = 0
        while v + 2 * nl <= xr.shape[0]:
            a0, a1 = vwload(dyr, v), vwload(dyr, v + nl)
            g0 = vadd(g0, a0)
            g1 = vadd(g1, a1)
            p0 = vfma(p0, a0, vmul(vadd(vwload(xr, v), -mean), invstd))
            p1 = vfma(p1, a1, vmul(vadd(vwload(xr, v + nl), -mean), invstd))
            v += 2 * nl
        for u in range(v, xr.shape[0]):
            a = dyr[u]
            gt += a
            pt += a * ((xr[u] - mean) * invstd)
    return vsum(vadd(g0, g1)) + gt, vsum(vadd(p0, p1)) + pt


def _planes(a):
    """a (N, C, H, W) as (N, C, H*W), each plane one row: a view (a must be C-contiguous).
    The loops run over whole planes: a loop over one 8-value row of an 8x8 plane never
    reaches the vector loop."""
    n, c, h, w = a.shape
    return a.reshape(n, c, h * w)


channel_sum = njit(inline="always", cache=True)(_channel_sum)
channel_squared_deviations = njit(inline="always", cache=True)(_channel_squared_deviations)
channel_gradient_sums = njit(inline="always", cache=True)(_channel_gradient_sums)
planes = njit(inline="always", cache=True)(_planes)


def _statistics(x3, ci, m, eps):
    """(mean, invstd, biased variance) of channel ci. A NaN among them is NaN itself (positive,
    quiet): the sign a NaN takes from the sums depends on the order in which the machine code
    meets its operands, which LLVM may choose differently in two kernels that inline these
    sums (the fused kernels make the unfused chain's bits, NaN included)."""
    mean = channel_sum(x3, ci) / m
    if mean != mean:
        mean = math.nan
    var = channel_squared_deviations(x3, ci, mean) / m
    if var != var:
        var = math.nan
    return mean, 1.0 / math.sqrt(var + eps), var


statistics = njit(inline="always", cache=True)(_statistics)


def _normalise(y3, x3, ci, mean, scale, shift):
    """y[:, ci] = (x[:, ci] - mean) * scale + shift, plane by plane (in-place safe)."""
    for b in range(x3.shape[0]):
        yp, xp = y3[b, ci], x3[b, ci]
        for v in range(xp.shape[0]):
            yp[v] = (xp[v] - mean) * scale + shift


normalise = njit(inline="always", cache=True)(_normalise)


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
    y3, x3 = planes(y), planes(x)
    for ci in prange(c):
        mean, invstd, var = statistics(x3, ci, m, eps)
        normalise(y3, x3, ci, mean, gamma[ci] * invstd, beta[ci])
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
    y3, x3 = planes(y), planes(x)
    for ci in prange(x.shape[1]):
        normalise(y3, x3, ci, saved_mean[ci], gamma[ci] * saved_invstd[ci], beta[ci])


def _batchnorm2d_forward_infer(y, x, gamma, beta, running_mean, running_var, eps):
    """y = gamma*(x-running_mean)/sqrt(running_var+eps) + beta.
    Writes y; in-place safe (y may be x)."""
    check_bn(y, x, gamma)
    check_bn(y, x, beta)
    check_bn(y, x, running_mean)
    check_bn(y, x, running_var)
    y3, x3 = planes(y), planes(x)
    for ci in prange(x.shape[1]):
        scale = gamma[ci] / math.sqrt(running_var[ci] + eps)
        normalise(y3, x3, ci, running_mean[ci], scale, beta[ci])


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
    dx3, dy3, x3 = planes(dx), planes(dy), planes(x)
    for ci in prange(c):
        mean = saved_mean[ci]
        invstd = saved_invstd[ci]
        sdy, sdyx = channel_gradient_sums(dy3, x3, ci, mean, invstd)
        dbeta[ci] = sdy
        dgamma[ci] = sdyx
        k = gamma[ci] * invstd / m
        for b in range(n):
            dxp, dyp, xp = dx3[b, ci], dy3[b, ci], x3[b, ci]
            for v in range(xp.shape[0]):
                xhat = (xp[v] - mean) * invstd
                dxp[v] = k * (m * dyp[v] - sdy - xhat * sdyx)


batchnorm2d_forward_train = njit(parallel=True, cache=True)(_batchnorm2d_forward_train)
batchnorm2d_forward_apply = njit(parallel=True, cache=True)(_batchnorm2d_forward_apply)
batchnorm2d_forward_infer = njit(parallel=True, cache=True)(_batchnorm2d_forward_infer)
batchnorm2d_backward = njit(parallel=True, cache=True)(_batchnorm2d_backward)
