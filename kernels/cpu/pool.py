"""2-D max and average pooling (NCHW), forward and backward.

Window (i, j) of an input plane covers rows i*sh-ph .. i*sh-ph+kh-1 and columns
j*sw-pw .. j*sw-pw+kw-1; positions outside the plane are padding.

Padding rule: the kernels require ph < kh and pw < kw, which guarantees that every
window overlaps the input (no window lies fully in the padding), so a max-pool
window always has a real element to choose. ``pool2d_output_shape`` (kernels/sizes.py)
and the kernels reject other paddings with ValueError.

Max pooling: padding counts as -inf and is never chosen; ties go to the first
maximum in row-major window order. ``argmax`` (int32, shape of y) stores the flat
index row*W + col of the chosen element inside its (n, c) input plane.

Average pooling counts padded zeros: every window sum is divided by kh*kw
(cuDNN CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, PyTorch count_include_pad=True).

All kernels take C-contiguous NCHW arrays and run in parallel over (n, c) planes;
a backward kernel zeroes its dx plane and then scatter-adds into it in a fixed
order, so results are deterministic. No kernel allocates or needs a workspace.
"""

import numpy as np
from numba import prange

from ._jit import njit
from ._window import valid_range

# Window indices such as max(i*sh - ph, 0) have a sign the compiler cannot see, so Numba
# would add a negative-index wraparound test to every access; they are valid positions,
# so the kernels index with unsigned integers (see conv.py).
_u = np.uint64


def _check_pool(y, x, kh, kw, sh, sw, ph, pw):
    if ph >= kh or pw >= kw or ph < 0 or pw < 0:
        raise ValueError("pool2d: padding must satisfy 0 <= ph < kh and 0 <= pw < kw")
    n, c, h, w = x.shape
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (w + 2 * pw - kw) // sw + 1
    if (
        y.shape[0] != n
        or y.shape[1] != c
        or y.shape[2] != oh
        or y.shape[3] != ow
        or oh < 1
        or ow < 1
    ):
        raise ValueError("pool2d: y must have shape pool2d_output_shape(x.shape, ...)")


check_pool = njit(cache=True)(_check_pool)


def _maxpool2d_forward(y, argmax, x, kh, kw, sh, sw, ph, pw):
    """y[n,c,i,j] = max over the window (padding = -inf); argmax = flat in-plane index of it.
    Writes y, argmax."""
    check_pool(y, x, kh, kw, sh, sw, ph, pw)
    if argmax.shape != y.shape:
        raise ValueError("maxpool2d_forward: argmax must have the shape of y")
    n, c, h, w = x.shape
    oh, ow = y.shape[2], y.shape[3]
    for t in prange(n * c):
        b = t // c
        ci = t % c
        for i in range(oh):
            u0 = i * sh - ph
            u_lo = max(u0, 0)
            u_hi = min(u0 + kh, h)
            for j in range(ow):
                v0 = j * sw - pw
                v_lo = max(v0, 0)
                v_hi = min(v0 + kw, w)
                best = x[b, ci, _u(u_lo), _u(v_lo)]
                best_idx = u_lo * w + v_lo
                for u in range(u_lo, u_hi):
                    for v in range(v_lo, v_hi):
                        val = x[b, ci, _u(u), _u(v)]
                        if val > best:
                            best = val
                            best_idx = u * w + v
                y[b, ci, i, j] = best
                argmax[b, ci, i, j] = best_idx


def _maxpool2d_backward(dx, dy, argmax, kh, kw, sh, sw, ph, pw):
    """dx = 0, then dx[n,c].flat[argmax[n,c,i,j]] += dy[n,c,i,j], the windows (i, j) taken in
    row-major order. Overwrites dx; parallel over (n,c).

    The window (kh, kw, sh, sw, ph, pw) is the forward's: this scatter does not need it, but
    the CUDA kernel does, which gathers instead (one thread per element of dx, summing the
    windows that chose it in the same order: no atomics, the same sums bit for bit)."""
    check_pool(dy, dx, kh, kw, sh, sw, ph, pw)
    if dy.shape != argmax.shape:
        raise ValueError("maxpool2d_backward: dy and argmax must have the same shape")
    n, c, h, w = dx.shape
    oh, ow = dy.shape[2], dy.shape[3]
    for t in prange(n * c):
        b = t // c
        ci = t % c
        plane = dx[b, ci].reshape(h * w)  # a view: dx must be C-contiguous
        for k in range(h * w):
            plane[k] = 0
        for i in range(oh):
            for j in range(ow):
                plane[_u(argmax[b, ci, i, j])] += dy[b, ci, i, j]


def _avgpool2d_forward(y, x, kh, kw, sh, sw, ph, pw):
    """y[n,c,i,j] = (sum of the window, padding counted as 0) / (kh*kw).
    Writes y; parallel over (n,c)."""
    check_pool(y, x, kh, kw, sh, sw, ph, pw)
    n, c, h, w = x.shape
    oh, ow = y.shape[2], y.shape[3]
    inv = 1.0 / (kh * kw)
    for t in prange(n * c):
        b = t // c
        ci = t % c
        for i in range(oh):
            u0 = i * sh - ph
            u_lo = max(u0, 0)
            u_hi = min(u0 + kh, h)
            for j in range(ow):
                v0 = j * sw - pw
                v_lo = max(v0, 0)
                v_hi = min(v0 + kw, w)
                s = 0.0
                for u in range(u_lo, u_hi):
                    for v in range(v_lo, v_hi):
                        s += x[b, ci, _u(u), _u(v)]
                y[b, ci, i, j] = s * inv


def _avgpool2d_backward(dx, dy, kh, kw, sh, sw, ph, pw):
    """dx[n,c,u,v] = sum over windows containing (u,v) of dy[n,c,i,j] / (kh*kw).
    Overwrites dx; parallel over (n,c)."""
    check_pool(dy, dx, kh, kw, sh, sw, ph, pw)
    n, c, h, w = dx.shape
    oh, ow = dy.shape[2], dy.shape[3]
    inv = 1.0 / (kh * kw)
    for t in prange(n * c):
        b = t // c
        ci = t % c
        for u in range(h):
            for v in range(w):
                dx[b, ci, u, v] = 0
        for p in range(kh):
            i_lo, i_hi = valid_range(oh, p, sh, ph, h)
            for q in range(kw):
                j_lo, j_hi = valid_range(ow, q, sw, pw, w)
                off = q - pw
                for i in range(i_lo, i_hi):
                    u = i * sh + p - ph
                    for j in range(j_lo, j_hi):
                        dx[b, ci, u, _u(j * sw + off)] += dy[b, ci, i, _u(j)] * inv


maxpool2d_forward = njit(parallel=True, cache=True)(_maxpool2d_forward)
maxpool2d_backward = njit(parallel=True, cache=True)(_maxpool2d_backward)
avgpool2d_forward = njit(parallel=True, cache=True)(_avgpool2d_forward)
avgpool2d_backward = njit(parallel=True, cache=True)(_avgpool2d_backward)
