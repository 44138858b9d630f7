"""2-D max and average pooling (NCHW), forward and backward.

The contract is kernels/cpu/pool.py's: window (i, j) covers rows i*sh-ph .. i*sh-ph+kh-1 and
columns j*sw-pw .. j*sw-pw+kw-1; the padding after the input (ph_end, pw_end; None: ph, pw) and
ceil_mode only set y's size, which the host checks; every pad is smaller than the window (every
window overlaps the input); max pooling treats padding as -inf, breaks ties towards the first
maximum in row-major window order, and stores in ``argmax`` (int32, shape of y) the flat index
row*W + col of the chosen element in its (n, c) plane; average pooling divides every window
sum by its taps in the padded input (count_include_pad, the default: kh*kw unless ceil_mode
clipped the window) or in the input alone.

Thread mapping: every kernel gives one thread to each OUTPUT element (of y, or of dx), which
loops over its window (or over the windows covering its pixel: a gather) and writes once;
threads run along the last axis (coalesced). Max-pooling backward gathers too: the thread of
dx[u, v] visits the windows that contain (u, v) and adds the dy of those whose argmax chose it.
A scatter (one thread per element of dy adding into dx at argmax) would need atomic adds where
windows overlap, and atomics add in whatever order the threads arrive: the last bit of dx
would vary from run to run, and a replayed graph would not repeat its eager numbers. The
gather adds in row-major window order, the CPU's, so both give the same bits.
None allocates or needs a workspace. float16 values are widened to float32 as they are read:
sums run in float32 (float64 where the float32 kernels' do), rounded once when stored.
"""

from numba import cuda

from ..sizes import window_output_size
from ._launch import (
    A4,
    acc_zero,
    check_device,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    unravel4,
    widen,
)

_WINDOW = "int64, int64, int64, int64, int64, int64"  # kh, kw, sh, sw, ph, pw
_COUNTED = "int64, int64, int64, int64"  # top, bottom, left, right: where the taps are counted


def _check_pool(name, y, x, kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode):
    """Check the arrays and the window (kernels/cpu/pool.py's check_pool); return the launch's
    window scalars and the (ph_end, pw_end) the padding after the input resolves to."""
    check_device(name, ndim=4, y=y, x=x)
    float_dtype(name, y=y, x=x)
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    if max(ph, ph_end) >= kh or max(pw, pw_end) >= kw or min(ph, pw, ph_end, pw_end) < 0:
        raise ValueError(
            "pool2d: padding must satisfy 0 <= ph, ph_end < kh and 0 <= pw, pw_end < kw"
        )
    if sh < 1 or sw < 1:
        raise ValueError("pool2d: stride must be >= 1")
    n, c, h, w = x.shape
    oh = window_output_size(h, kh, sh, ph, ph_end, ceil_mode=ceil_mode)
    ow = window_output_size(w, kw, sw, pw, pw_end, ceil_mode=ceil_mode)
    if y.shape != (n, c, oh, ow) or oh < 1 or ow < 1:
        raise ValueError("pool2d: y must have shape pool2d_output_shape(x.shape, ...)")
    return tuple(int(a) for a in (kh, kw, sh, sw, ph, pw)), (int(ph_end), int(pw_end))


def _counted(x_shape, window, ends, count_include_pad):
    """(top, bottom, left, right): the rows and columns in which an average window's taps are
    counted, the padded input's or the input's."""
    h, w = x_shape[2], x_shape[3]
    ph, pw = window[4], window[5]
    if count_include_pad:
        return (-ph, h + ends[0], -pw, w + ends[1])
    return (0, h, 0, w)


@kernel(*each_float(f"void({A4}, int32[:, :, :, ::1], {A4}, {_WINDOW})"))
def _maxpool_forward_kernel(y, argmax, x, kh, kw, sh, sw, ph, pw):
    """Thread t: y[b, c, i, j] and argmax[b, c, i, j], t = ((b*C + c)*OH + i)*OW + j."""
    t = cuda.grid(1)
    n, c, oh, ow = y.shape
    if t >= n * c * oh * ow:
        return
    b, ci, i, j = unravel4(t, c, oh, ow)
    h, w = x.shape[2], x.shape[3]
    u_lo = max(i * sh - ph, 0)
    u_hi = min(i * sh - ph + kh, h)
    v_lo = max(j * sw - pw, 0)
    v_hi = min(j * sw - pw + kw, w)
    best = widen(x[b, ci, u_lo, v_lo])  # compared in float32: no half-precision calls
    best_idx = u_lo * w + v_lo
    for u in range(u_lo, u_hi):
        for v in range(v_lo, v_hi):
            val = widen(x[b, ci, u, v])
            if val > best:  # strict: ties keep the first maximum
                best = val
                best_idx = u * w + v
    y[b, ci, i, j] = best
    argmax[b, ci, i, j] = best_idx


@kernel(*each_float(f"void({A4}, {A4}, int32[:, :, :, ::1], {_WINDOW})"))
def _maxpool_backward_kernel(dx, dy, argmax, kh, kw, sh, sw, ph, pw):
    """Thread t: dx[b, c, u, v] = the sum of dy[b, c, i, j] over the windows (i, j) that contain
    (u, v) and chose it (argmax), in row-major (i, j) order, as the CPU's scatter adds them: a
    gather, so no two threads write one element and no atomics make the order vary.
    Window row p = u - (i*sh - ph), so i = (u + ph - p) / sh: p descending gives i ascending."""
    t = cuda.grid(1)
    n, c, h, w = dx.shape
    if t >= n * c * h * w:
        return
    b, ci, u, v = unravel4(t, c, h, w)
    oh, ow = dy.shape[2], dy.shape[3]
    me = u * w + v
    s = acc_zero(dx)
    for p in range(kh - 1, -1, -1):
        ii = u + ph - p
        if ii < 0 or ii % sh != 0 or ii // sh >= oh:
            continue
        for q in range(kw - 1, -1, -1):
            jj = v + pw - q
            if jj >= 0 and jj % sw == 0 and jj // sw < ow:
                if argmax[b, ci, ii // sh, jj // sw] == me:
                    s += widen(dy[b, ci, ii // sh, jj // sw])
    dx[b, ci, u, v] = s


@kernel(*each_float(f"void({A4}, {A4}, {_WINDOW}, {_COUNTED})"))
def _avgpool_forward_kernel(y, x, kh, kw, sh, sw, ph, pw, top, bottom, left, right):
    """Thread t: y[b, c, i, j] = (window sum, float64) / (its taps in [top, bottom) x
    [left, right))."""
    t = cuda.grid(1)
    n, c, oh, ow = y.shape
    if t >= n * c * oh * ow:
        return
    b, ci, i, j = unravel4(t, c, oh, ow)
    h, w = x.shape[2], x.shape[3]
    s = 0.0
    for u in range(max(i * sh - ph, 0), min(i * sh - ph + kh, h)):
        for v in range(max(j * sw - pw, 0), min(j * sw - pw + kw, w)):
            s += widen(x[b, ci, u, v])
    u0 = i * sh - ph
    v0 = j * sw - pw
    rows = min(u0 + kh, bottom) - max(u0, top)
    cols = min(v0 + kw, right) - max(v0, left)
    y[b, ci, i, j] = s * (1.0 / (rows * cols))


@kernel(*each_float(f"void({A4}, {A4}, {_WINDOW}, {_COUNTED})"))
def _avgpool_backward_kernel(dx, dy, kh, kw, sh, sw, ph, pw, top, bottom, left, right):
    """Thread t: dx[b, c, u, v] = sum over the windows (i, j) containing (u, v) of
    dy[b, c, i, j] / (the forward's taps of window (i, j)): window row p = u - (i*sh - ph), so
    i = (u + ph - p) / sh."""
    t = cuda.grid(1)
    n, c, h, w = dx.shape
    if t >= n * c * h * w:
        return
    b, ci, u, v = unravel4(t, c, h, w)
    oh, ow = dy.shape[2], dy.shape[3]
    s = 0.0
    for p in range(kh):
        ii = u + ph - p
        if ii < 0 or ii % sh != 0 or ii // sh >= oh:
            continue
        rows = min(ii - ph + kh, bottom) - max(ii - ph, top)  # window row ii//sh starts at ii-ph
        for q in range(kw):
            jj = v + pw - q
            if jj >= 0 and jj % sw == 0 and jj // sw < ow:
                cols = min(jj - pw + kw, right) - max(jj - pw, left)
                s += widen(dy[b, ci, ii // sh, jj // sw]) * (1.0 / (rows * cols))
    dx[b, ci, u, v] = s


def maxpool2d_forward(
    y, argmax, x, kh, kw, sh, sw, ph, pw, ph_end=None, pw_end=None, ceil_mode=False, *, stream=0
):
    """y[n,c,i,j] = max over the window (padding = -inf); argmax = flat in-plane index of it.
    Writes y, argmax; one thread per element of y."""
    geometry = (kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode)
    args, _ = _check_pool("maxpool2d_forward", y, x, *geometry)
    check_device("maxpool2d_forward", argmax=argmax)
    if argmax.shape != y.shape or argmax.dtype.name != "int32":
        raise ValueError("maxpool2d_forward: argmax must be int32 with the shape of y")
    launch_1d(_maxpool_forward_kernel, y.size, stream, y, argmax, x, *args)


def maxpool2d_backward(
    dx, dy, argmax, kh, kw, sh, sw, ph, pw, ph_end=None, pw_end=None, ceil_mode=False, *, stream=0
):
    """dx = 0, then dx[n,c].flat[argmax[n,c,i,j]] += dy[n,c,i,j] in row-major window order.
    Overwrites dx; one thread per element of dx, gathering (no atomics: deterministic)."""
    geometry = (kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode)
    args, _ = _check_pool("maxpool2d_backward", dy, dx, *geometry)
    check_device("maxpool2d_backward", argmax=argmax)
    if argmax.dtype.name != "int32" or argmax.shape != dy.shape:
        raise ValueError("maxpool2d_backward: argmax must be int32 with the shape of dy")
    launch_1d(_maxpool_backward_kernel, dx.size, stream, dx, dy, argmax, *args)


def avgpool2d_forward(
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
    *,
    stream=0,
):
    """y[n,c,i,j] = (sum of the window, padding counted as 0) / its taps in the padded input
    (count_include_pad) or in the input alone. Writes y; one thread per element of y."""
    geometry = (kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode)
    args, ends = _check_pool("avgpool2d_forward", y, x, *geometry)
    counted = _counted(x.shape, args, ends, count_include_pad)
    launch_1d(_avgpool_forward_kernel, y.size, stream, y, x, *args, *counted)


def avgpool2d_backward(
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
    *,
    stream=0,
):
    """dx[n,c,u,v] = sum over windows containing (u,v) of dy[n,c,i,j] / the forward's taps of
    window (i, j). Overwrites dx; one thread per element of dx (a gather: no atomics)."""
    geometry = (kh, kw, sh, sw, ph, pw, ph_end, pw_end, ceil_mode)
    args, ends = _check_pool("avgpool2d_backward", dy, dx, *geometry)
    counted = _counted(dx.shape, args, ends, count_include_pad)
    launch_1d(_avgpool_backward_kernel, dx.size, stream, dx, dy, *args, *counted)
