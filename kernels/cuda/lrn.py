"""Local response normalisation across channels (AlexNet, Caffe's ACROSS_CHANNELS), NCHW.

The maths is kernels/cpu/lrn.py's: for every (n, h, w) and channel c,
    scale[n,c,h,w] = k + alpha/size * sum_{c' in window(c)} x[n,c',h,w]^2
    y[n,c,h,w]     = x[n,c,h,w] * scale[n,c,h,w]^(-beta)
with window(c) = c - before .. c - before + size - 1 clipped at the edges (`before`: size//2 by
default, torch's window; (size-1)//2 is ONNX's), and the backward
    dx[c] = dy[c] * scale[c]^(-beta)
            - 2*alpha*beta/size * x[c] * sum_{c' : c in window(c')} dy[c'] * y[c'] / scale[c']
over the mirrored window c + before - size + 1 .. c + before.

The forward writes y only; the backward reads x, y and dy and takes the window sums again with
the forward's own device function (_window_scale), rounding each scale to x's dtype as storing it
used to: its dx is the one a backward reading a stored scale computed, bit for bit
(kernels/cpu/lrn.py says more).

Thread mapping: one thread per element. The arrays are viewed as (N, C, H*W) (free views), and
thread i handles element (b, c, s) = i in that order, so consecutive threads take consecutive
pixels s of one channel plane and every read of a neighbouring channel c' (at the same pixels)
is coalesced too. Each window sum is taken directly in a fixed channel order with a float64
accumulator (no running sum): deterministic. Nothing is allocated. float16 values are widened to
float32 as they are read (a rounded scale too), so the arithmetic is the float32 kernel's.
"""

import math

from numba import cuda

from ._launch import (
    A3,
    check_device,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)


@device_function
def _window_scale(x, b, ci, s, size, before, alpha, k):
    """scale at x[b, ci, s], in float64: k + alpha/size * (sum of x^2 over window(ci), in
    channel order). Both kernels call it, so the backward's sums are the forward's, bit for bit."""
    total = 0.0
    for cc in range(max(ci - before, 0), min(ci - before + size, x.shape[1])):
        a = widen(x[b, cc, s])
        total += a * a
    return k + alpha / size * total


@kernel(*each_float(f"void({A3}, {A3}, int64, float64, float64, float64, int64)"))
def _lrn_forward_kernel(y, x, size, alpha, beta, k, before):
    """Thread i: y at element (b, c, s) = i of (N, C, H*W)."""
    i = cuda.grid(1)
    n, c, hw = x.shape
    if i >= n * c * hw:
        return
    s = i % hw
    ci = (i // hw) % c
    b = i // (hw * c)
    d = _window_scale(x, b, ci, s, size, before, alpha, k)
    y[b, ci, s] = widen(x[b, ci, s]) * math.pow(d, -beta)


@kernel(*each_float(f"void({A3}, {A3}, {A3}, {A3}, int64, float64, float64, float64, int64)"))
def _lrn_backward_kernel(dx, dy, x, y, size, alpha, beta, k, before):
    """Thread i: dx at element (b, c, s) = i of (N, C, H*W), over the mirrored window."""
    i = cuda.grid(1)
    n, c, hw = x.shape
    if i >= n * c * hw:
        return
    s = i % hw
    ci = (i // hw) % c
    b = i // (hw * c)
    rounded = x.dtype.type  # each scale in x's dtype, as a stored scale would be
    total = 0.0
    # window(c') contains c for c' in c + before - size + 1 .. c + before
    for cc in range(max(ci + before - size + 1, 0), min(ci + before + 1, c)):
        d = widen(rounded(_window_scale(x, b, cc, s, size, before, alpha, k)))
        total += widen(dy[b, cc, s]) * widen(y[b, cc, s]) / d
    coef = 2.0 * alpha * beta / size
    d = widen(rounded(_window_scale(x, b, ci, s, size, before, alpha, k)))
    dx[b, ci, s] = widen(dy[b, ci, s]) * math.pow(d, -beta) - coef * widen(x[b, ci, s]) * total


def _planes(name, size, before, **arrays):
    """Check 4-D arrays of x's shape; return their (N, C, H*W) views."""
    if size < 1:
        raise ValueError("lrn: size must be >= 1")
    if before < 0 or before >= size:
        raise ValueError("lrn: before (the window's channels before c) must be in [0, size)")
    check_device(name, ndim=4, **arrays)
    float_dtype(name, **arrays)
    shape = arrays["x"].shape
    if any(a.shape != shape for a in arrays.values()):
        raise ValueError("lrn: every array must have x's (N, C, H, W) shape")
    n, c, h, w = shape
    return {label: a.reshape(n, c, h * w) for label, a in arrays.items()}


def lrn_forward(y, x, size, alpha, beta, k, before=None, *, stream=0):
    """y = x * scale^-beta, scale = k + alpha/size * (window sum of x^2) in float64; `before`
    channels of the window before c (None: size//2). Writes y. One thread per element."""
    before = size // 2 if before is None else before
    v = _planes("lrn_forward", size, before, y=y, x=x)
    args = (int(size), float(alpha), float(beta), float(k), int(before))
    launch_1d(_lrn_forward_kernel, x.size, stream, v["y"], v["x"], *args)


def lrn_backward(dx, dy, x, y, size, alpha, beta, k, before=None, *, stream=0):
    """dx = dy*scale^-beta - 2*alpha*beta/size * x * (mirrored window sum of dy*y/scale), each
    scale rebuilt from x and rounded to x's dtype; `before` as the forward's. Writes dx. One
    thread per element."""
    before = size // 2 if before is None else before
    v = _planes("lrn_backward", size, before, dx=dx, dy=dy, x=x, y=y)
    args = (int(size), float(alpha), float(beta), float(k), int(before))
    launch_1d(_lrn_backward_kernel, x.size, stream, v["dx"], v["dy"], v["x"], v["y"], *args)
