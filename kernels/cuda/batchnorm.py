"""Batch normalisation over the channels of an NCHW tensor (statistics over N, H, W).

The maths and the running-statistics update are kernels/cpu/batchnorm.py's (m = N*H*W):
    mean = sum(x)/m,  var = sum((x-mean)^2)/m,  invstd = 1/sqrt(var + eps),
    y = (x - mean) * (gamma*invstd) + beta,
    running_mean = momentum*running_mean + (1-momentum)*mean,
    running_var  = momentum*running_var  + (1-momentum)*var*m/(m-1)   (SINGA's convention).

Thread mapping. The training forward and the backward need per-channel sums: ONE BLOCK PER
CHANNEL. x is viewed as (N, C, H*W) (a free view: each (n, c) plane is contiguous); thread t of
block c sums elements t, t+T, ... of every plane of channel c (consecutive threads read
consecutive addresses) into a float64 register, and the block adds the T partial sums in a tree
in shared memory (reduce.block_sum). The same block then writes y / dx for its channel. Two
passes over x (mean, then the squared deviations) as on the CPU: no catastrophic cancellation.
The inference and apply kernels need no sums: one thread per element.

Dtypes: x, y, dy, dx, gamma, beta, dgamma, dbeta and the running statistics share one float dtype;
saved_mean and saved_invstd are float64 (the precision they are computed in, so that forward_apply
rebuilds forward_train's y bit for bit: both kernels compute y with the same device function).
float16 arrays are widened as they are read: the arithmetic is the float32 kernels' (float64 sums
and statistics), rounded once per element stored. No kernel allocates or needs a workspace; sums are
deterministic (fixed split and tree), and differ from the CPU's serial sums in the last bits.
"""

import math

import numpy as np
from numba import cuda, float64

from ._launch import (
    A1,
    A3,
    REDUCE_THREADS,
    check_device,
    check_dtype,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)
from .reduce import block_sum

_F64 = "float64[::1]"


@device_function
def _normalise(xv, mean, scale, shift):
    """(x - mean) * scale + shift: the one expression both training forward and apply use."""
    return (xv - mean) * scale + shift


@kernel(*each_float(f"void({A3}, {_F64}, {_F64}, {A1}, {A1}, {A3}, {A1}, {A1}, float64, float64)"))
def _forward_train_kernel(
    y, saved_mean, saved_invstd, running_mean, running_var, x, gamma, beta, momentum, eps
):
    """Block c: the statistics of channel c, then y for channel c; thread 0 writes the saved
    and running statistics of c."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n, _, hw = x.shape
    m = n * hw
    s = 0.0
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            s += widen(x[b, c, k])
    mean = block_sum(buf, s) / m
    sq = 0.0
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            d = widen(x[b, c, k]) - mean
            sq += d * d
    var = block_sum(buf, sq) / m
    invstd = 1.0 / math.sqrt(var + eps)
    scale = np.float64(widen(gamma[c])) * invstd  # float64, spelled out: see _forward_apply_kernel
    shift = widen(beta[c])
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            y[b, c, k] = _normalise(widen(x[b, c, k]), mean, scale, shift)
    if t == 0:
        saved_mean[c] = mean
        saved_invstd[c] = invstd
        unbiased = var * m / (m - 1) if m > 1 else var
        running_mean[c] = momentum * widen(running_mean[c]) + (1.0 - momentum) * mean
        running_var[c] = momentum * widen(running_var[c]) + (1.0 - momentum) * unbiased


@kernel(*each_float(f"void({A3}, {A3}, {A1}, {A1}, {_F64}, {_F64})"))
def _forward_apply_kernel(y, x, gamma, beta, saved_mean, saved_invstd):
    """Thread i: element i of (N, C, H*W); its channel is (i // HW) % C."""
    i = cuda.grid(1)
    n, nc, hw = x.shape
    if i < n * nc * hw:
        plane = i // hw
        b = plane // nc
        c = plane % nc
        k = i % hw
        # gamma*invstd in float64 exactly as the training forward computes it (spelled out, as
        # the simulator follows NumPy's rules, where float32 * Python float stays float32)
        scale = np.float64(widen(gamma[c])) * saved_invstd[c]
        y[b, c, k] = _normalise(widen(x[b, c, k]), saved_mean[c], scale, widen(beta[c]))


@kernel(*each_float(f"void({A3}, {A3}, {A1}, {A1}, {A1}, {A1}, float64)"))
def _forward_infer_kernel(y, x, gamma, beta, running_mean, running_var, eps):
    """Thread i: element i of (N, C, H*W), with the running statistics of its channel."""
    i = cuda.grid(1)
    n, nc, hw = x.shape
    if i < n * nc * hw:
        plane = i // hw
        b = plane // nc
        c = plane % nc
        k = i % hw
        scale = widen(gamma[c]) / math.sqrt(widen(running_var[c]) + eps)
        y[b, c, k] = (widen(x[b, c, k]) - widen(running_mean[c])) * scale + widen(beta[c])


@kernel(*each_float(f"void({A3}, {A1}, {A1}, {A3}, {A3}, {A1}, {_F64}, {_F64})"))
def _backward_kernel(dx, dgamma, dbeta, dy, x, gamma, saved_mean, saved_invstd):
    """Block c: dbeta[c] = sum dy, dgamma[c] = sum dy*xhat (two block sums), then dx of c."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n, _, hw = x.shape
    m = n * hw
    mean = saved_mean[c]
    invstd = saved_invstd[c]
    sdy = 0.0
    sdyx = 0.0
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            g = widen(dy[b, c, k])
            sdy += g
            sdyx += g * ((widen(x[b, c, k]) - mean) * invstd)
    sdy = block_sum(buf, sdy)
    sdyx = block_sum(buf, sdyx)
    coef = widen(gamma[c]) * invstd / m
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            xhat = (widen(x[b, c, k]) - mean) * invstd
            dx[b, c, k] = coef * (m * widen(dy[b, c, k]) - sdy - xhat * sdyx)
    if t == 0:
        dbeta[c] = sdy
        dgamma[c] = sdyx


def _planes(a):
    """(N, C, H, W) -> the (N, C, H*W) view the kernels index."""
    n, c, h, w = a.shape
    return a.reshape(n, c, h * w)


def _check_bn(name, tensors, vectors, saved=None):
    """tensors: 4-D, x's shape; vectors: (C,), the same float dtype; saved: (C,) float64."""
    saved = saved or {}
    check_device(name, ndim=4, **tensors)
    check_device(name, ndim=1, **vectors, **saved)
    float_dtype(name, **tensors, **vectors)
    check_dtype(name, np.float64, **saved)  # the precision the statistics are computed in
    shape = tensors["x"].shape
    channels = [*vectors.values(), *saved.values()]
    if any(a.shape != shape for a in tensors.values()) or any(
        v.shape != (shape[1],) for v in channels
    ):
        raise ValueError(
            f"{name}: y must match x (N,C,H,W) and per-channel vectors must have length C"
        )


def batchnorm2d_forward_train(
    y,
    saved_mean,
    saved_invstd,
    running_mean,
    running_var,
    x,
    gamma,
    beta,
    momentum,
    eps,
    *,
    stream=0,
):
    """y = gamma*(x-mean)*invstd + beta with batch stats; writes y, saved_mean, saved_invstd
    (float64); updates running_* in place. One block per channel (float64 block sums)."""
    _check_bn(
        "batchnorm2d_forward_train",
        dict(y=y, x=x),
        dict(gamma=gamma, beta=beta, running_mean=running_mean, running_var=running_var),
        dict(saved_mean=saved_mean, saved_invstd=saved_invstd),
    )
    c = x.shape[1]
    if c > 0 and x.size > 0:
        stats = (saved_mean, saved_invstd, running_mean, running_var)
        args = (_planes(y), *stats, _planes(x), gamma, beta, float(momentum), float(eps))
        _forward_train_kernel[c, REDUCE_THREADS, stream](*args)


def batchnorm2d_forward_apply(y, x, gamma, beta, saved_mean, saved_invstd, *, stream=0):
    """y = (x - mean) * (gamma*invstd) + beta with the statistics a training forward saved;
    bit-identical to that forward's y (same device function); running statistics untouched.
    One thread per element."""
    _check_bn(
        "batchnorm2d_forward_apply",
        dict(y=y, x=x),
        dict(gamma=gamma, beta=beta),
        dict(saved_mean=saved_mean, saved_invstd=saved_invstd),
    )
    args = (_planes(y), _planes(x), gamma, beta, saved_mean, saved_invstd)
    launch_1d(_forward_apply_kernel, x.size, stream, *args)


def batchnorm2d_forward_infer(y, x, gamma, beta, running_mean, running_var, eps, *, stream=0):
    """y = gamma*(x-running_mean)/sqrt(running_var+eps) + beta. Writes y; in-place safe
    (y may be x). One thread per element."""
    _check_bn(
        "batchnorm2d_forward_infer",
        dict(y=y, x=x),
        dict(gamma=gamma, beta=beta, running_mean=running_mean, running_var=running_var),
    )
    args = (_planes(y), _planes(x), gamma, beta, running_mean, running_var, float(eps))
    launch_1d(_forward_infer_kernel, x.size, stream, *args)


def batchnorm2d_backward(dx, dgamma, dbeta, dy, x, gamma, saved_mean, saved_invstd, *, stream=0):
    """Training-mode gradient: xhat=(x-mean)*invstd, dbeta=sum dy, dgamma=sum dy*xhat,
    dx = gamma*invstd/m * (m*dy - dbeta - xhat*dgamma). Overwrites dx, dgamma, dbeta.
    One block per channel (float64 block sums)."""
    _check_bn(
        "batchnorm2d_backward",
        dict(dx=dx, dy=dy, x=x),
        dict(dgamma=dgamma, dbeta=dbeta, gamma=gamma),
        dict(saved_mean=saved_mean, saved_invstd=saved_invstd),
    )
    c = x.shape[1]
    if c > 0 and x.size > 0:
        stats = (saved_mean, saved_invstd)
        args = (_planes(dx), dgamma, dbeta, _planes(dy), _planes(x), gamma, *stats)
        _backward_kernel[c, REDUCE_THREADS, stream](*args)
