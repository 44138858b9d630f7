"""Local response normalisation across channels (AlexNet, Caffe's ACROSS_CHANNELS), NCHW.

Forward, for every (n, h, w) and channel c:
    scale[n,c,h,w] = k + alpha/size * sum_{c' in window(c)} x[n,c',h,w]^2
    y[n,c,h,w]     = x[n,c,h,w] * scale[n,c,h,w]^(-beta)
window(c) is the `size` channels c - size//2 .. c - size//2 + size - 1, clipped at the edges
(channels outside count as zeros, and the sum is still divided by `size`): the same window as
torch.nn.LocalResponseNorm and, for odd sizes, Caffe.

Backward (y and scale are the forward's outputs, kept for it):
    dx[c] = dy[c] * scale[c]^(-beta)
            - 2*alpha*beta/size * x[c] * sum_{c' : c in window(c')} dy[c'] * y[c'] / scale[c']
For odd sizes {c' : c in window(c')} is window(c) itself; for even sizes it is the mirrored
window c + size//2 - size + 1 .. c + size//2, which the kernel uses.

Memory: `scale` has x's shape and is written by the forward so that the backward needs no
second pass over the window sums (Caffe keeps it too). Each window sum is taken directly (no
running sum, whose subtractions would lose precision), in a fixed channel order, with a
float64 accumulator: results are deterministic. Both kernels run in parallel over the (n, h)
rows, read and write contiguous w-runs, and allocate nothing.
"""

import math

import numpy as np
from numba import prange

from ._jit import njit

# Channel indices such as max(c - half, 0) have a sign the compiler cannot see, so index with
# unsigned integers to skip Numba's negative-index wraparound test (see conv.py).
_u = np.uint64


def _check_lrn(a, x, size):
    if size < 1:
        raise ValueError("lrn: size must be >= 1")
    if a.shape != x.shape:
        raise ValueError("lrn: every array must have x's (N, C, H, W) shape")


check_lrn = njit(cache=True)(_check_lrn)


def _lrn_forward(y, scale, x, size, alpha, beta, k):
    """scale = k + alpha/size * (window sum of x^2); y = x * scale^-beta. Writes y and scale."""
    check_lrn(y, x, size)
    check_lrn(scale, x, size)
    n, c, h, w = x.shape
    coef = alpha / size
    before = size // 2  # channels of the window before c
    for t in prange(n * h):
        b = t // h
        u = t % h
        for ci in range(c):
            lo = max(ci - before, 0)
            hi = min(ci - before + size, c)
            for v in range(w):
                s = 0.0
                for cc in range(lo, hi):
                    a = x[b, _u(cc), u, v]
                    s += a * a
                d = k + coef * s
                scale[b, ci, u, v] = d
                y[b, ci, u, v] = x[b, ci, u, v] * math.pow(d, -beta)


def _lrn_backward(dx, dy, x, y, scale, size, alpha, beta):
    """dx = dy*scale^-beta - 2*alpha*beta/size * x * (mirrored window sum of dy*y/scale).
    Writes dx."""
    check_lrn(dx, x, size)
    check_lrn(dy, x, size)
    check_lrn(y, x, size)
    check_lrn(scale, x, size)
    n, c, h, w = x.shape
    coef = 2.0 * alpha * beta / size
    after = size // 2  # window(c') contains c for c' in c + after - size + 1 .. c + after
    for t in prange(n * h):
        b = t // h
        u = t % h
        for ci in range(c):
            lo = max(ci + after - size + 1, 0)
            hi = min(ci + after + 1, c)
            for v in range(w):
                s = 0.0
                for cc in range(lo, hi):
                    s += dy[b, _u(cc), u, v] * y[b, _u(cc), u, v] / scale[b, _u(cc), u, v]
                d = scale[b, ci, u, v]
                dx[b, ci, u, v] = dy[b, ci, u, v] * math.pow(d, -beta) - coef * x[b, ci, u, v] * s


lrn_forward = njit(parallel=True, cache=True)(_lrn_forward)
lrn_backward = njit(parallel=True, cache=True)(_lrn_backward)
