"""Local response normalisation across channels (AlexNet, Caffe's ACROSS_CHANNELS), NCHW.

Forward, for every (n, h, w) and channel c:
    scale[n,c,h,w] = k + alpha/size * sum_{c' in window(c)} x[n,c',h,w]^2
    y[n,c,h,w]     = x[n,c,h,w] * scale[n,c,h,w]^(-beta)
window(c) is the `size` channels c - before .. c - before + size - 1, clipped at the edges
(channels outside count as zeros, and the sum is still divided by `size`). `before`, the
channels of the window before c, is size//2 by default: the window of
torch.nn.LocalResponseNorm and, for odd sizes, Caffe. ONNX's LRN has (size-1)//2, which
differs for even sizes only (its window is c - floor((size-1)/2) .. c + ceil((size-1)/2)).

Backward (x and y as the forward read and wrote them; scale rebuilt from x):
    dx[c] = dy[c] * scale[c]^(-beta)
            - 2*alpha*beta/size * x[c] * sum_{c' : c in window(c')} dy[c'] * y[c'] / scale[c']
For odd sizes and the centred window {c' : c in window(c')} is window(c) itself; in general it
is the mirrored window c + before - size + 1 .. c + before, which the kernel uses.

Memory: the forward writes y only, and the backward reads x, y and dy (as cuDNN's LRN and
SuperNeurons do): scale, a tensor of x's size, is never stored. The backward takes the window
sums again (window_scale, which both kernels call, so the sums are the forward's bit for bit)
and rounds each scale to x's dtype, as storing it used to: dx is the one a backward reading a
stored scale computed, bit for bit. The price: size + 1 window sums per element in the
backward (the mirrored window's scales and its own; no powers: y is read, not rebuilt).
Each window sum is taken directly (no running sum, whose subtractions would lose precision),
in a fixed channel order, with a float64 accumulator: results are deterministic. Both kernels
run in parallel over the (n, h) rows, read and write contiguous w-runs, and allocate nothing.
"""

import math

import numpy as np
from numba import prange

from ._jit import njit

# Channel indices such as max(c - half, 0) have a sign the compiler cannot see, so index with
# unsigned integers to skip Numba's negative-index wraparound test (see conv.py).
_u = np.uint64


def _check_lrn(a, x, size, before):
    if size < 1:
        raise ValueError("lrn: size must be >= 1")
    if before < 0 or before >= size:
        raise ValueError("lrn: before (the window's channels before c) must be in [0, size)")
    if a.shape != x.shape:
        raise ValueError("lrn: every array must have x's (N, C, H, W) shape")


check_lrn = njit(cache=True)(_check_lrn)


def _window_scale(x, b, ci, u, v, size, before, k, alpha_n):
    """scale at x[b, ci, u, v], in float64: k + alpha_n * (sum of x^2 over window(ci), in
    channel order; each square in x's dtype, as Numba multiplies two float32)."""
    lo = max(ci - before, 0)
    hi = min(ci - before + size, x.shape[1])
    s = 0.0
    for cc in range(lo, hi):
        a = x[b, _u(cc), u, v]
        s += a * a
    return k + alpha_n * s


window_scale = njit(cache=True, inline="always")(_window_scale)


def _lrn_forward(y, x, size, alpha, beta, k, before=None):
    """y = x * scale^-beta, scale = k + alpha/size * (window sum of x^2) in float64; `before`
    channels of the window before c (None: size//2). Writes y."""
    before = size // 2 if before is None else before
    check_lrn(y, x, size, before)
    n, c, h, w = x.shape
    alpha_n = alpha / size
    for t in prange(n * h):
        b = t // h
        u = t % h
        for ci in range(c):
            for v in range(w):
                d = window_scale(x, b, ci, u, v, size, before, k, alpha_n)
                y[b, ci, u, v] = x[b, ci, u, v] * math.pow(d, -beta)


def _lrn_backward(dx, dy, x, y, size, alpha, beta, k, before=None):
    """dx = dy*scale^-beta - 2*alpha*beta/size * x * (mirrored window sum of dy*y/scale), each
    scale rebuilt from x and rounded to x's dtype; `before` as the forward's. Writes dx."""
    before = size // 2 if before is None else before
    check_lrn(dx, x, size, before)
    check_lrn(dy, x, size, before)
    check_lrn(y, x, size, before)
    n, c, h, w = x.shape
    alpha_n = alpha / size
    coef = 2.0 * alpha * beta / size
    # window(c') contains c for c' in c + before - size + 1 .. c + before
    # Each scale in x's dtype, as a stored scale would be: in float32, dy*y/scale is then
    # float32 arithmetic, and scale^-beta the power of the rounded value, as before.
    rounded = x.dtype.type
    for t in prange(n * h):
        b = t // h
        u = t % h
        for ci in range(c):
            lo = max(ci + before - size + 1, 0)
            hi = min(ci + before + 1, c)
            for v in range(w):
                s = 0.0
                for cc in range(lo, hi):
                    d = rounded(window_scale(x, b, cc, u, v, size, before, k, alpha_n))
                    s += dy[b, _u(cc), u, v] * y[b, _u(cc), u, v] / d
                d = rounded(window_scale(x, b, ci, u, v, size, before, k, alpha_n))
                dx[b, ci, u, v] = dy[b, ci, u, v] * math.pow(d, -beta) - coef * x[b, ci, u, v] * s


lrn_forward = njit(parallel=True, cache=True)(_lrn_forward)
lrn_backward = njit(parallel=True, cache=True)(_lrn_backward)
