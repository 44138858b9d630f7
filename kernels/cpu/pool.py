"""2-D max and average pooling (NCHW), forward and backward.

Window (i, j) of an input plane covers rows i*sh-ph .. i*sh-ph+kh-1 and columns
j*sw-pw .. j*sw-pw+kw-1; positions outside the plane are padding.

Padding: ph rows above and ph_end below, pw columns left and pw_end right (ONNX's
asymmetric pads; None: ph_end = ph, pw_end = pw). With ceil_mode, y has the ceiling's
output size (ONNX, PyTorch): the last window may run past the padding, and is clipped.
Padding rule: the kernels require every pad < the window, and a ceil_mode window
starts inside the input or the padding before it, which guarantees that every
window overlaps the input (no window lies fully in the padding), so a max-pool
window always has a real element to choose. ``pool2d_output_shape`` (kernels/sizes.py)
and the kernels reject other paddings with ValueError.

Max pooling: padding counts as -inf and is never chosen; ties go to the first
maximum in row-major window order. ``argmax`` (int32, shape of y) stores the flat
index row*W + col of the chosen element inside its (n, c) input plane.

Average pooling, with count_include_pad (the default), counts padded zeros: a window
sum is divided by its taps inside the padded input, kh*kw but where ceil_mode clips
the last window (cuDNN CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, PyTorch
count_include_pad=True, ONNX count_include_pad=1). Without it, by its taps inside
the input alone (cuDNN's EXCLUDE_PADDING, ONNX's default count_include_pad=0).

All kernels take C-contiguous NCHW arrays and run in parallel over (n, c) planes;
a backward kernel zeroes its dx plane and then scatter-adds into it in a fixed
order, so results are deterministic. No kernel allocates or needs a workspace.
"""

import numpy as np
from numba import prange

from ._jit import njit
from ._window import output_size

# Window indices such as max(i*sh - ph, 0) have a sign the compiler cannot see, so Numba
# would add a negative-index wraparound test to every access; they are valid positions,
# so the kernels index with unsigned integers (see conv.py).
_u = np.uint64


def _check_pool(y, x, kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode):
    if max(ph, ph_end) >= kh or max(pw, pw_end) >= kw or min(ph, pw, ph_end, pw_end) < 0:
        raise ValueError(
            "pool2d: padding must satisfy 0 <= ph, ph_end < kh and 0 <= pw, pw_end < kw"
        )
    n, c, h, w = x.shape
    oh = output_size(h, kh, sh, ph, ph_end, ceil_mode)
    ow = output_size(w, kw, sw, pw, pw_end, ceil_mode)
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


def _taps(start, k, lo, hi):
    """Taps of the window [start, start + k) that lie in [lo, hi)."""
    return min(start + k, hi) - max(start, lo)


taps = njit(cache=True, inline="always")(_taps)


def _max_2x2(y, argmax, x):
    """maxpool2d_forward of 2x2 windows with stride 2, none clipped (the SINGA CNN's pools):
    the same four comparisons in the same order, written out, where the general loops' bounds
    are computed at every window (0.44 ms for the CNN's first pool, 64 x 20 planes of 24x24, on
    a 2-core AMD EPYC). Parallel over (n,c)."""
    n, c, h, w = x.shape
    oh, ow = y.shape[2], y.shape[3]
    for t in prange(n * c):
        b, ci = t // c, t % c
        for i in range(oh):
            top, bottom = x[b, ci, 2 * i], x[b, ci, 2 * i + 1]
            for j in range(ow):
                v = 2 * j
                best, at = top[v], 2 * i * w + v
                if top[v + 1] > best:
                    best, at = top[v + 1], 2 * i * w + v + 1
                if bottom[v] > best:
                    best, at = bottom[v], (2 * i + 1) * w + v
                if bottom[v + 1] > best:
                    best, at = bottom[v + 1], (2 * i + 1) * w + v + 1
                y[b, ci, i, j] = best
                argmax[b, ci, i, j] = at


max_2x2 = njit(inline="always", cache=True)(_max_2x2)


def _maxpool2d_forward(
    y, argmax, x, kh, kw, sh, sw, ph, pw, ph_end=None, pw_end=None, ceil_mode=False
):
    """y[n,c,i,j] = max over the window (padding = -inf); argmax = flat in-plane index of it.
    Writes y, argmax."""
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    check_pool(y, x, kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode)
    if argmax.shape != y.shape:
        raise ValueError("maxpool2d_forward: argmax must have the shape of y")
    n, c, h, w = x.shape
    oh, ow = y.shape[2], y.shape[3]
    if (kh, kw, sh, sw, ph, pw) == (2, 2, 2, 2, 0, 0) and 2 * oh <= h and 2 * ow <= w:
        max_2x2(y, argmax, x)
        return
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


def _maxpool2d_backward(
    dx, dy, argmax, kh, kw, sh, sw, ph, pw, ph_end=None, pw_end=None, ceil_mode=False
):
    """dx = 0, then dx[n,c].flat[argmax[n,c,i,j]] += dy[n,c,i,j], the windows (i, j) taken in
    row-major order. Overwrites dx; parallel over (n,c).

    The window (kh, kw, sh, sw, ph, pw, ...) is the forward's: this scatter does not need it,
    but the CUDA kernel does, which gathers instead (one thread per element of dx, summing the
    windows that chose it in the same order: no atomics, the same sums bit for bit)."""
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    check_pool(dy, dx, kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode)
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


def _avgpool2d_forward(
    y,
    x,
    kh,
    kw,
    sh,
    sw,
    ph,
    pw,
    ph_end=None,
    pw_end=None,
    ceil_mode=False,
    count_include_pad=True,
):
    """y[n,c,i,j] = (sum of the window, padding counted as 0) / its taps in the padded input
    (count_include_pad: kh*kw unless ceil_mode clipped it) or in the input alone.
    Writes y; parallel over (n,c)."""
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    check_pool(y, x, kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode)
    n, c, h, w = x.shape
    oh, ow = y.shape[2], y.shape[3]
    # the rows and columns a window's taps are counted in
    top, bottom = (-ph, h + ph_end) if count_include_pad else (0, h)
    left, right = (-pw, w + pw_end) if count_include_pad else (0, w)
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
                y[b, ci, i, j] = s * (1.0 / (taps(u0, kh, top, bottom) * taps(v0, kw, left, right)))


def _avgpool2d_backward(
    dx,
    dy,
    kh,
    kw,
    sh,
    sw,
    ph,
    pw,
    ph_end=None,
    pw_end=None,
    ceil_mode=False,
    count_include_pad=True,
):
    """dx[n,c,u,v] = sum over windows containing (u,v) of dy[n,c,i,j] / the forward's taps of
    window (i, j). Overwrites dx; parallel over (n,c).

    Each window scatters its share into its taps, the windows taken from the last (i, j) back
    to the first: so where windows overlap, a tap adds its shares in the order of the kernel
    offsets (p, q) ascending, the order of the forward's sum. A window's taps are whole rows
    of the plane, one short contiguous loop each: a global pool is one window of h*w taps."""
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    check_pool(dy, dx, kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode)
    n, c, h, w = dx.shape
    oh, ow = dy.shape[2], dy.shape[3]
    top, bottom = (-ph, h + ph_end) if count_include_pad else (0, h)
    left, right = (-pw, w + pw_end) if count_include_pad else (0, w)
    for t in prange(n * c):
        b = t // c
        ci = t % c
        for u in range(h):
            for v in range(w):
                dx[b, ci, u, v] = 0
        for i in range(oh - 1, -1, -1):
            u0 = i * sh - ph
            u_lo = max(u0, 0)
            u_hi = min(u0 + kh, h)
            rows = taps(u0, kh, top, bottom)
            for j in range(ow - 1, -1, -1):
                v0 = j * sw - pw
                v_lo = max(v0, 0)
                v_hi = min(v0 + kw, w)
                g = dy[b, ci, i, j] * (1.0 / (rows * taps(v0, kw, left, right)))
                for u in range(u_lo, u_hi):
                    for v in range(v_lo, v_hi):
                        dx[b, ci, _u(u), _u(v)] += g


maxpool2d_forward = njit(parallel=True, cache=True)(_maxpool2d_forward)
maxpool2d_backward = njit(parallel=True, cache=True)(_maxpool2d_backward)
avgpool2d_forward = njit(parallel=True, cache=True)(_avgpool2d_forward)
avgpool2d_backward = njit(parallel=True, cache=True)(_avgpool2d_backward)
