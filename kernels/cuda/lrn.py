"""Local response normalisation across channels (AlexNet, Caffe's ACROSS_CHANNELS), NCHW.

The maths is kernels/cpu/lrn.py's: for every (n, h, w) and channel c,
    scale[n,c,h,w] = k + alpha/size * sum_{c' in window(c)} x[n,c',h,w]^2
    y[n,c,h,w]     = x[n,c,h,w] * scale[n,c,h,w]^(-beta)
with window(c) = c - size//2 .. c - size//2 + size - 1 clipped at the edges, and the backward
    dx[c] = dy[c] * scale[c]^(-beta)
            - 2*alpha*beta/size * x[c] * sum_{c' : c in window(c')} dy[c'] * y[c'] / scale[c']
over the mirrored window c + size//2 - size + 1 .. c + size//2.

Thread mapping: one thread per element. The arrays are viewed as (N, C, H*W) (free views), and
thread i handles element (b, c, s) = i in that order, so consecutive threads take consecutive
pixels s of one channel plane and every read of a neighbouring channel c' (at the same pixels)
is coalesced too. Each window sum is taken directly in a fixed channel order with a float64
accumulator (no running sum): deterministic. ``scale`` is written by the forward for the
backward; nothing is allocated.
"""

import math

from numba import cuda

from ._launch import A3, check_device, each_float, float_dtype, kernel, launch_1d


@kernel(*each_float(f"void({A3}, {A3}, {A3}, int64, float64, float64, float64)"))
def _lrn_forward_kernel(y, scale, x, size, alpha, beta, k):
    """Thread i: scale and y at element (b, c, s) = i of (N, C, H*W)."""
    i = cuda.grid(1)
    n, c, hw = x.shape
    if i >= n * c * hw:
        return
    s = i % hw
    ci = (i // hw) % c
    b = i // (hw * c)
    before = size // 2  # channels of the window before c
    total = 0.0
    for cc in range(max(ci - before, 0), min(ci - before + size, c)):
        a = x[b, cc, s]
        total += a * a
    d = k + alpha / size * total
    scale[b, ci, s] = d
    y[b, ci, s] = x[b, ci, s] * math.pow(d, -beta)


@kernel(*each_float(f"void({A3}, {A3}, {A3}, {A3}, {A3}, int64, float64, float64)"))
def _lrn_backward_kernel(dx, dy, x, y, scale, size, alpha, beta):
    """Thread i: dx at element (b, c, s) = i of (N, C, H*W), over the mirrored window."""
    i = cuda.grid(1)
    n, c, hw = x.shape
    if i >= n * c * hw:
        return
    s = i % hw
    ci = (i // hw) % c
    b = i // (hw * c)
    after = size // 2  # window(c') contains c for c' in c + after - size + 1 .. c + after
    total = 0.0
    for cc in range(max(ci + after - size + 1, 0), min(ci + after + 1, c)):
        total += dy[b, cc, s] * y[b, cc, s] / scale[b, cc, s]
    coef = 2.0 * alpha * beta / size
    d = scale[b, ci, s]
    dx[b, ci, s] = dy[b, ci, s] * math.pow(d, -beta) - coef * x[b, ci, s] * total


def _planes(name, size, **arrays):
    """Check 4-D arrays of x's shape; return their (N, C, H*W) views."""
    if size < 1:
        raise ValueError("lrn: size must be >= 1")
    check_device(name, ndim=4, **arrays)
    float_dtype(name, **arrays)
    shape = arrays["x"].shape
    if any(a.shape != shape for a in arrays.values()):
        raise ValueError("lrn: every array must have x's (N, C, H, W) shape")
    n, c, h, w = shape
    return {label: a.reshape(n, c, h * w) for label, a in arrays.items()}


def lrn_forward(y, scale, x, size, alpha, beta, k, *, stream=0):
    """scale = k + alpha/size * (window sum of x^2); y = x * scale^-beta. Writes y and scale.
    One thread per element."""
    v = _planes("lrn_forward", size, y=y, scale=scale, x=x)
    args = (int(size), float(alpha), float(beta), float(k))
    launch_1d(_lrn_forward_kernel, x.size, stream, v["y"], v["scale"], v["x"], *args)


def lrn_backward(dx, dy, x, y, scale, size, alpha, beta, *, stream=0):
    """dx = dy*scale^-beta - 2*alpha*beta/size * x * (mirrored window sum of dy*y/scale).
    Writes dx. One thread per element."""
    v = _planes("lrn_backward", size, dx=dx, dy=dy, x=x, y=y, scale=scale)
    args = (int(size), float(alpha), float(beta))
    arrays = (v["dx"], v["dy"], v["x"], v["y"], v["scale"])
    launch_1d(_lrn_backward_kernel, x.size, stream, *arrays, *args)
