"""Fused kernels: one launch where graph mode's fusion pass (nnmem/graph/fuse.py) finds a chain of
two or three memory-bound kernels; the CUDA twins of kernels/cpu/fused.py.

The maths, chain by chain (outputs first; z is the ReLU's output, y the BN's, s = y + r):

    batchnorm2d_relu_forward_train      batchnorm2d_forward_train(y..); relu_forward(z, y)
    batchnorm2d_relu_forward_apply      batchnorm2d_forward_apply(y..); relu_forward(z, y)
    batchnorm2d_relu_backward           relu_backward(dy, dz, z); batchnorm2d_backward(.. dy ..)
    batchnorm2d_add_relu_forward_train  batchnorm2d_forward_train(y..); add(s, y, r); relu(z, s)
    batchnorm2d_add_relu_forward_apply  batchnorm2d_forward_apply(y..); add(s, y, r); relu(z, s)
    batchnorm2d_add_relu_backward       relu_backward(ds, dz, z); batchnorm2d_backward(.. ds ..)
    add_bias_relu_nchw                  add_bias_nchw(y, b); relu_forward(y, y)
    relu_backward_bias_grad_nchw        relu_backward(dy, dz, z); bias_grad_nchw(db, dy)
    add_bias_rows_relu                  copy(y, x); add_bias_rows(y, b); relu_forward(z, y)
    relu_backward_sum_rows              relu_backward(dy, dz, z); sum_rows(db, dy)

with ReLU ``0 if v < 0 else v`` and its gradient ``dy if y > 0 else 0``, elementwise's expressions
(NaN passes; NVVM compiles the clip as v <= 0 ? 0 : v, -0.0 -> +0.0, in the chain and here alike).

The bits contract: on one device, every output (saved and running statistics too) is bit for bit
the chain's. So each fused kernel keeps the chain's THREAD MAPPING (one block of REDUCE_THREADS
per channel for the BN's sums and bias_grad_nchw, thread t taking elements t, t+T, ... of each
(n, c) plane; sum_rows's 32 x 8 blocks; one thread per element elsewhere), its float64
accumulators and tree (reduce.block_sum), its expressions (batchnorm._normalise for y) and its
ROUNDING POINTS: where the chain stores y in the array's dtype for the next kernel to read, the
fused kernel rounds y to that dtype in a register (_rounded) before the add and the clip. A
masked gradient (dz or 0) is exact in any dtype: it stays in a float64 register.

Memory: nothing allocated; y, s and the BN's dy never reach memory. Aliasing: one thread reads
and writes each element, so ds may be dz (6: ds is written after dz's last read), dy may be dz
(8, 10), z may be x (9). The BN backward masks dz twice (sums, then dx) rather than store the
mask between passes: a store would keep the loads of a latency-bound pass from being issued ahead.
"""

import math

import numpy as np
from numba import cuda, float64

from ._launch import (
    A1,
    A2,
    A3,
    REDUCE_THREADS,
    check_device,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)
from .batchnorm import _F64, _check_bn, _normalise, _planes
from .reduce import _COLS, _ROW_SPLIT, block_sum


# ---------------------------------------------------------------- BatchNorm + (Add +) ReLU
@device_function
def _channel_statistics(buf, x, c, t):
    """(mean, biased variance) of channel c of x (N, C, HW): batchnorm's two block sums."""
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
    return mean, block_sum(buf, sq) / m


@device_function
def _rounded(like, v):
    """v rounded to `like`'s dtype as a store there rounds it (a 1-element local: a register)."""
    one = cuda.local.array(1, like.dtype)
    one[0] = v
    return one[0]


@device_function
def _bn_relu_element(z, x, r, b, c, k, mean, scale, shift, add_r):
    """z[b, c, k] = relu(y (+ r)), y = _normalise(x) rounded to z's dtype, as the chain stores y."""
    v = _rounded(z, _normalise(widen(x[b, c, k]), mean, scale, shift))
    if add_r:
        v = v + widen(r[b, c, k])  # add's expression, in the arrays' dtype
    z[b, c, k] = 0 if v < 0 else v


@device_function
def _relu_grad(dz, z, b, c, k):
    """relu_backward's expression for one element: dz where z > 0, else 0. dz is read first,
    whatever z: a read inside the condition would wait for z's (two trips to memory, not one)."""
    g = widen(dz[b, c, k])
    return g if widen(z[b, c, k]) > 0 else 0


@kernel(
    *each_float(
        f"void({A3}, {_F64}, {_F64}, {A1}, {A1}, {A3}, {A1}, {A1}, {A3}, float64, float64, boolean)"
    )
)
def _bn_relu_train_kernel(
    z, saved_mean, saved_invstd, running_mean, running_var, x, gamma, beta, r, momentum, eps, add_r
):
    """Block c: channel c's statistics, then z for channel c (r added when `add_r`); thread 0
    writes the saved and running statistics of c, as batchnorm's _forward_train_kernel."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n, _, hw = x.shape
    m = n * hw
    mean, var = _channel_statistics(buf, x, c, t)
    invstd = 1.0 / math.sqrt(var + eps)
    scale = np.float64(widen(gamma[c])) * invstd
    shift = widen(beta[c])
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            _bn_relu_element(z, x, r, b, c, k, mean, scale, shift, add_r)
    if t == 0:
        saved_mean[c] = mean
        saved_invstd[c] = invstd
        unbiased = var * m / (m - 1) if m > 1 else var
        running_mean[c] = momentum * widen(running_mean[c]) + (1.0 - momentum) * mean
        running_var[c] = momentum * widen(running_var[c]) + (1.0 - momentum) * unbiased


@kernel(*each_float(f"void({A3}, {A3}, {A1}, {A1}, {A3}, {_F64}, {_F64}, boolean)"))
def _bn_relu_apply_kernel(z, x, gamma, beta, r, saved_mean, saved_invstd, add_r):
    """Thread i: element i of (N, C, H*W), as batchnorm's _forward_apply_kernel."""
    i = cuda.grid(1)
    n, nc, hw = x.shape
    if i < n * nc * hw:
        plane = i // hw
        c = plane % nc
        scale = np.float64(widen(gamma[c])) * saved_invstd[c]
        _bn_relu_element(
            z, x, r, plane // nc, c, i % hw, saved_mean[c], scale, widen(beta[c]), add_r
        )


@kernel(
    *each_float(f"void({A3}, {A1}, {A1}, {A3}, {A3}, {A3}, {A3}, {A1}, {_F64}, {_F64}, boolean)")
)
def _bn_relu_backward_kernel(
    dx, dgamma, dbeta, ds, dz, z, x, gamma, saved_mean, saved_invstd, keep_ds
):
    """Block c: g = relu_backward(dz, z), summed as batchnorm's _backward_kernel sums dy; then,
    g masked again, dx of channel c, and ds = g when `keep_ds` (after dz's last read)."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n, _, hw = x.shape
    m = n * hw
    mean, invstd = saved_mean[c], saved_invstd[c]
    sdy = sdyx = 0.0
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            g = _relu_grad(dz, z, b, c, k)
            sdy += g
            sdyx += g * ((widen(x[b, c, k]) - mean) * invstd)
    sdy = block_sum(buf, sdy)
    sdyx = block_sum(buf, sdyx)
    coef = widen(gamma[c]) * invstd / m
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            g = _relu_grad(dz, z, b, c, k)
            xhat = (widen(x[b, c, k]) - mean) * invstd
            dx[b, c, k] = coef * (m * g - sdy - xhat * sdyx)
            if keep_ds:
                ds[b, c, k] = g
    if t == 0:
        dbeta[c] = sdy
        dgamma[c] = sdyx


def _train(name, z, stats, x, gamma, beta, r, momentum, eps, stream):
    """Check and launch the training forward; stats = (saved_mean, saved_invstd, running_mean,
    running_var); r None: no residual (x then stands in for r, never read)."""
    saved_mean, saved_invstd, running_mean, running_var = stats
    tensors = dict(z=z, x=x) if r is None else dict(z=z, x=x, r=r)
    vectors = dict(gamma=gamma, beta=beta, running_mean=running_mean, running_var=running_var)
    _check_bn(name, tensors, vectors, dict(saved_mean=saved_mean, saved_invstd=saved_invstd))
    c = x.shape[1]
    if c > 0 and x.size > 0:
        planes = (_planes(x), gamma, beta, _planes(x if r is None else r))
        args = (_planes(z), *stats, *planes, float(momentum), float(eps), r is not None)
        _bn_relu_train_kernel[c, REDUCE_THREADS, stream](*args)


def _apply(name, z, x, gamma, beta, r, saved, stream):
    """Check and launch the apply forward; saved: {name: array}; r as _train's."""
    tensors = dict(z=z, x=x) if r is None else dict(z=z, x=x, r=r)
    _check_bn(name, tensors, dict(gamma=gamma, beta=beta), saved)
    args = (_planes(z), _planes(x), gamma, beta, _planes(x if r is None else r), *saved.values())
    launch_1d(_bn_relu_apply_kernel, x.size, stream, *args, r is not None)


def _backward(name, dx, dgamma, dbeta, ds, dz, z, x, gamma, saved, stream):
    """Check and launch the backward; ds None: the masked gradient is not kept (dx then stands
    in for ds, never written); saved as _apply's."""
    tensors = dict(dx=dx, dz=dz, z=z, x=x) if ds is None else dict(dx=dx, ds=ds, dz=dz, z=z, x=x)
    _check_bn(name, tensors, dict(dgamma=dgamma, dbeta=dbeta, gamma=gamma), saved)
    c = x.shape[1]
    if c > 0 and x.size > 0:
        dsp = _planes(dx if ds is None else ds)
        grads = (_planes(dx), dgamma, dbeta, dsp, _planes(dz), _planes(z), _planes(x))
        args = (*grads, gamma, *saved.values(), ds is not None)
        _bn_relu_backward_kernel[c, REDUCE_THREADS, stream](*args)


def batchnorm2d_relu_forward_train(
    z,
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
    """z = relu(batchnorm(x)) with batch statistics; writes z, saved_* (float64); updates
    running_* in place. One block per channel."""
    stats = (saved_mean, saved_invstd, running_mean, running_var)
    _train("batchnorm2d_relu_forward_train", z, stats, x, gamma, beta, None, momentum, eps, stream)


def batchnorm2d_relu_forward_apply(z, x, gamma, beta, saved_mean, saved_invstd, *, stream=0):
    """z = relu(batchnorm(x)) with the statistics a training forward saved (recomputation's
    rebuild). One thread per element."""
    saved = dict(saved_mean=saved_mean, saved_invstd=saved_invstd)
    _apply("batchnorm2d_relu_forward_apply", z, x, gamma, beta, None, saved, stream)


def batchnorm2d_relu_backward(
    dx, dgamma, dbeta, dz, z, x, gamma, saved_mean, saved_invstd, *, stream=0
):
    """dx, dgamma, dbeta of relu(batchnorm(x)) from dz and z, its output (the BN's output's
    gradient is never stored). Overwrites dx, dgamma, dbeta. One block per channel."""
    saved = dict(saved_mean=saved_mean, saved_invstd=saved_invstd)
    _backward("batchnorm2d_relu_backward", dx, dgamma, dbeta, None, dz, z, x, gamma, saved, stream)


def batchnorm2d_add_relu_forward_train(
    z,
    saved_mean,
    saved_invstd,
    running_mean,
    running_var,
    x,
    gamma,
    beta,
    r,
    momentum,
    eps,
    *,
    stream=0,
):
    """z = relu(batchnorm(x) + r), a residual join; writes z, saved_*; updates running_*."""
    stats = (saved_mean, saved_invstd, running_mean, running_var)
    _train("batchnorm2d_add_relu_forward_train", z, stats, x, gamma, beta, r, momentum, eps, stream)


def batchnorm2d_add_relu_forward_apply(z, x, gamma, beta, r, saved_mean, saved_invstd, *, stream=0):
    """z = relu(batchnorm(x) + r) with saved statistics. One thread per element."""
    saved = dict(saved_mean=saved_mean, saved_invstd=saved_invstd)
    _apply("batchnorm2d_add_relu_forward_apply", z, x, gamma, beta, r, saved, stream)


def batchnorm2d_add_relu_backward(
    dx, dgamma, dbeta, ds, dz, z, x, gamma, saved_mean, saved_invstd, *, stream=0
):
    """ds = dz * (z > 0), the gradient of the sum (r's branch reads it too; ds may be dz), then
    dx, dgamma, dbeta of the BN from ds. Overwrites all four. One block per channel."""
    saved = dict(saved_mean=saved_mean, saved_invstd=saved_invstd)
    _backward(
        "batchnorm2d_add_relu_backward", dx, dgamma, dbeta, ds, dz, z, x, gamma, saved, stream
    )


# ---------------------------------------------------------------- bias + ReLU
@kernel(*each_float(f"void({A3}, {A1})"))
def _add_bias_relu_nchw_kernel(y, b):
    """Thread i: element i of y viewed as (N, C, H*W), as elementwise's _add_bias_nchw_kernel."""
    i = cuda.grid(1)
    n, c, hw = y.shape
    if i < n * c * hw:
        plane = i // hw
        v = widen(y[plane // c, plane % c, i % hw]) + widen(b[plane % c])
        y[plane // c, plane % c, i % hw] = 0 if v < 0 else v


@kernel(*each_float(f"void({A2}, {A2}, {A1})"))
def _add_bias_rows_relu_kernel(z, x, b):
    """Thread i: element (i // F, i % F), as elementwise's _add_bias_rows_kernel."""
    i = cuda.grid(1)
    nrow, ncol = x.shape
    if i < nrow * ncol:
        v = widen(x[i // ncol, i % ncol]) + widen(b[i % ncol])
        z[i // ncol, i % ncol] = 0 if v < 0 else v


@kernel(*each_float(f"void({A3}, {A1}, {A3}, {A3})"))
def _relu_backward_bias_grad_kernel(dy, db, dz, z):
    """Block c: dy = relu_backward(dz, z), summed as reduce's _bias_grad_kernel sums dy."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n, _, hw = dz.shape
    s = 0.0
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            g = _relu_grad(dz, z, b, c, k)
            dy[b, c, k] = g
            s += g
    total = block_sum(buf, s)
    if t == 0:
        db[c] = total


@kernel(*each_float(f"void({A2}, {A1}, {A2}, {A2})"))
def _relu_backward_sum_rows_kernel(dy, db, dz, z):
    """Block: 32 columns; thread (tx, ty) masks and sums rows ty, ty+8, ... of its column, then
    the 8 partial sums meet in reduce's _sum_rows_kernel's tree."""
    buf = cuda.shared.array((_ROW_SPLIT, _COLS), dtype=float64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    nrow, ncol = dz.shape
    f = cuda.blockIdx.x * _COLS + tx
    s = 0.0
    if f < ncol:
        for r in range(ty, nrow, _ROW_SPLIT):
            d = widen(dz[r, f])  # read whatever z, as _relu_grad reads
            g = d if widen(z[r, f]) > 0 else 0
            dy[r, f] = g
            s += g
    buf[ty, tx] = s
    cuda.syncthreads()
    step = _ROW_SPLIT // 2
    while step > 0:
        if ty < step:
            buf[ty, tx] += buf[ty + step, tx]
        cuda.syncthreads()
        step //= 2
    if ty == 0 and f < ncol:
        db[f] = buf[0, tx]


def _check_masked(name, ndim, db, dy, dz, z):
    """dy, dz, z: one shape, ndim axes, one float dtype with db, which has the shape[1] sums."""
    check_device(name, ndim=1, db=db)
    check_device(name, ndim=ndim, dy=dy, dz=dz, z=z)
    float_dtype(name, dy=dy, db=db, dz=dz, z=z)
    if dy.shape != dz.shape or z.shape != dz.shape or db.shape != (dz.shape[1],):
        raise ValueError(f"{name}: dy, dz, z must share one shape and db have length shape[1]")


def add_bias_relu_nchw(y, b, *, stream=0):
    """y[n, c] = relu(y[n, c] + b[c]) in place, y (N, C, H, W), b (C,). A thread per element."""
    check_device("add_bias_relu_nchw", ndim=4, y=y)
    check_device("add_bias_relu_nchw", ndim=1, b=b)
    float_dtype("add_bias_relu_nchw", y=y, b=b)
    n, c, h, w = y.shape
    if c != b.shape[0]:
        raise ValueError("add_bias_relu_nchw: y.shape[1] must equal b.shape[0]")
    launch_1d(_add_bias_relu_nchw_kernel, y.size, stream, y.reshape(n, c, h * w), b)


def relu_backward_bias_grad_nchw(dy, db, dz, z, *, stream=0):
    """dy = dz * (z > 0) and db[c] = sum_{n,h,w} dy[n, c] (dy may be dz). Overwrites dy and db.
    One block per channel, float64 sums."""
    _check_masked("relu_backward_bias_grad_nchw", 4, db, dy, dz, z)
    n, c, h, w = dz.shape
    if c > 0:
        dy3, dz3, z3 = (a.reshape(n, c, h * w) for a in (dy, dz, z))
        _relu_backward_bias_grad_kernel[c, REDUCE_THREADS, stream](dy3, db, dz3, z3)


def add_bias_rows_relu(z, x, b, *, stream=0):
    """z[n, f] = relu(x[n, f] + b[f]), x and z (N, F) (z may be x), b (F,). A thread per element."""
    check_device("add_bias_rows_relu", ndim=2, z=z, x=x)
    check_device("add_bias_rows_relu", ndim=1, b=b)
    float_dtype("add_bias_rows_relu", z=z, x=x, b=b)
    if z.shape != x.shape or x.shape[1] != b.shape[0]:
        raise ValueError("add_bias_rows_relu: z and x must be (N, F) and b (F,)")
    launch_1d(_add_bias_rows_relu_kernel, x.size, stream, z, x, b)


def relu_backward_sum_rows(dy, db, dz, z, *, stream=0):
    """dy = dz * (z > 0) and db[f] = sum_n dy[n, f] for (N, F) arrays (dy may be dz).
    Overwrites dy and db. One 32 x 8 block per 32 columns, float64 sums."""
    _check_masked("relu_backward_sum_rows", 2, db, dy, dz, z)
    ncol = dz.shape[1]
    if ncol > 0:
        grid = (ncol + _COLS - 1) // _COLS
        _relu_backward_sum_rows_kernel[grid, (_COLS, _ROW_SPLIT), stream](dy, db, dz, z)
