"""2-D convolution (NCHW, no bias): direct and im2col + GEMM algorithms (groups, dilation and
asymmetric padding: the direct kernels' arguments after the padding, as on the CPU, where
kernels/cpu/conv.py says what they mean; the GEMM kernels take groups = 1, dilation 1 and
symmetric padding).

Forward: y[n,o,i,j] = sum_{c,p,q} w[o,c,p,q] * x[n,c,i*sh+p-ph, j*sw+q-pw]  (zero padding).
The two backward kernels are its adjoints with respect to x (data) and w (filter).

Direct algorithm: one thread per OUTPUT element (of y, dx or dw), which loops over the terms of
its sum and writes it once. No atomics and no workspace: the backward-data thread *gathers*
from every (o, p, q) whose window covers its input pixel instead of scattering into it. Threads
run along the last axis, so a warp writes consecutive elements.

im2col + GEMM algorithm: the kernels/cpu algorithm, with the same workspace contract, layout and
groups of samples (read kernels/cpu/conv.py's docstring): a group of B samples is unfolded into
    cols[(c*KH + p)*KW + q, (b*OH + i)*OW + j] = x[b, c, i*sh+p-ph, j*sw+q-pw]  (0 in the padding),
a (K, B*L) matrix (K = C*KH*KW, L = OH*OW), and each pass is ONE tiled GEMM (gemm.py):
    forward:          Y' (O, B*L)   = W (O, K) @ cols (K, B*L)
    backward data:    cols (K, B*L) = W^T (K, O) @ dY' (O, B*L), then col2im
    backward filter:  dW (O, K)    (+)= dY' (O, B*L) @ cols^T (B*L, K)
with Y' / dY' the (O, B*L) transpose of the chunk's (B, O, L) y / dy (a one-thread-per-element
kernel; skipped when B == 1, where Y' is y[n] itself). im2col writes one cols element per thread
(consecutive threads, consecutive columns: coalesced writes); col2im gives one thread to each
pixel of x, which gathers the cols entries that came from it (no atomics).

Sample groups: B = conv2d_gemm_sample_group(N, OH, OW, "cuda") (kernels/sizes.py), fixed by
the geometry and the batch, never by the workspace: every GEMM has the same shape in any
workspace, so the same sums (gemm.py picks its kernel, and so the order of a sum, by the
product's shape). A GPU's groups are larger than a CPU's (8192 GEMM columns against 1024): a
forward GEMM of 16 filters over 1024 columns has 64 tiles of 16 x 16, one block each, where a
GPU runs thousands of blocks at once. Workspace (1-D, x's dtype, C-contiguous): one group,
B * (K + O) * L elements (conv2d_gemm_workspace_per_sample each): cols at the start, the
(O, B*L) buffer after it; a smaller one is refused. The backward-filter pass adds each later
group's product into dw in place (the GEMM's ``accumulate``), in group order on one stream:
deterministic.

float16 arrays: every product and sum is taken in float32 (float64 where the float32 kernel
sums in float64) and rounded once, into the element written. The GEMM algorithm's workspace
holds x's dtype, so a float16 pass also rounds where it stores cols, the transposed buffer and
each group's dw: it agrees with the direct kernels to a few float16 ulps, not bit for bit.
"""

from numba import cuda

from ..cpu import conv as cpu_conv
from ..sizes import conv2d_gemm_sample_group, conv2d_output_shape
from ._launch import (
    A2,
    A3,
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
from .elementwise import fill
from .gemm import gemm

# sh, sw, ph, pw, groups, dil_h, dil_w (the padding after the input only sizes y: the host checks)
_DIRECT = each_float(f"void({A4}, {A4}, {A4}, {', '.join(['int64'] * 7)})")
_UNFOLD = "int64, int64, int64, int64, int64, int64"  # kh, kw, sh, sw, ph, pw


def _check_conv(
    name, y, x, w, sh, sw, ph, pw, groups=1, dil_h=1, dil_w=1, ph_end=None, pw_end=None
):
    """y (N,O,OH,OW), x (N,C,H,W), w (O,C/groups,KH,KW) must agree (the CPU's
    check_conv_shapes). Returns the launch's scalars: sh, sw, ph, pw, groups, dil_h, dil_w."""
    check_device(name, ndim=4, y=y, x=x, w=w)
    float_dtype(name, y=y, x=x, w=w)
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    if sh < 1 or sw < 1 or min(ph, pw, ph_end, pw_end) < 0 or dil_h < 1 or dil_w < 1:
        raise ValueError(f"{name}: need stride >= 1, dilation >= 1 and padding >= 0")
    n, c, h, wd = x.shape
    o, c2, kh, kw = w.shape
    if groups < 1 or c % groups or o % groups:
        raise ValueError(f"{name}: groups must divide both the channels and the filters")
    oh = (h + ph + ph_end - dil_h * (kh - 1) - 1) // sh + 1
    ow = (wd + pw + pw_end - dil_w * (kw - 1) - 1) // sw + 1
    if c2 * groups != c or y.shape != (n, o, oh, ow) or oh < 1 or ow < 1:
        raise ValueError(
            f"{name}: shapes of y (N,O,OH,OW), x (N,C,H,W), w (O,C,KH,KW) do not agree"
        )
    return tuple(int(a) for a in (sh, sw, ph, pw, groups, dil_h, dil_w))


# ---------------------------------------------------------------- direct algorithm
@kernel(*_DIRECT)
def _forward_direct_kernel(y, x, w, sh, sw, ph, pw, groups, dil_h, dil_w):
    """Thread t: y[b, o, i, j] with t = ((b*O + o)*OH + i)*OW + j."""
    t = cuda.grid(1)
    n, o, oh, ow = y.shape
    if t >= n * o * oh * ow:
        return
    b, oc, i, j = unravel4(t, o, oh, ow)
    _, _, h, wd = x.shape
    _, cg, kh, kw = w.shape
    first = (oc // (o // groups)) * cg
    acc = acc_zero(y)
    for cl in range(cg):
        ci = first + cl
        for p in range(kh):
            u = i * sh + p * dil_h - ph
            if u < 0 or u >= h:
                continue
            for q in range(kw):
                v = j * sw + q * dil_w - pw
                if 0 <= v < wd:
                    acc += widen(w[oc, cl, p, q]) * widen(x[b, ci, u, v])
    y[b, oc, i, j] = acc


@kernel(*_DIRECT)
def _backward_data_direct_kernel(dx, dy, w, sh, sw, ph, pw, groups, dil_h, dil_w):
    """Thread t: dx[b, c, u, v], gathering w[o,c,p,q] * dy[b,o,i,j] over the (o, p, q) with
    u = i*sh + p*dil_h - ph, v = j*sw + q*dil_w - pw for a whole output position (i, j)."""
    t = cuda.grid(1)
    n, c, h, wd = dx.shape
    if t >= n * c * h * wd:
        return
    b, ci, u, v = unravel4(t, c, h, wd)
    o, cg, kh, kw = w.shape
    og = o // groups
    g = ci // cg
    cl = ci - g * cg
    oh, ow = dy.shape[2], dy.shape[3]
    acc = acc_zero(dx)
    for oc in range(g * og, (g + 1) * og):
        for p in range(kh):
            ii = u + ph - p * dil_h  # = i * sh for the output row i whose window row p is u
            if ii < 0 or ii % sh != 0 or ii // sh >= oh:
                continue
            i = ii // sh
            for q in range(kw):
                jj = v + pw - q * dil_w
                if jj >= 0 and jj % sw == 0 and jj // sw < ow:
                    acc += widen(w[oc, cl, p, q]) * widen(dy[b, oc, i, jj // sw])
    dx[b, ci, u, v] = acc


@kernel(*_DIRECT)
def _backward_filter_direct_kernel(dw, dy, x, sh, sw, ph, pw, groups, dil_h, dil_w):
    """Thread t: dw[o, c, p, q] = sum_{b,i,j} dy[b,o,i,j] * x[b,c,i*sh+p*dil_h-ph,j*sw+q*dil_w-pw],
    in float64 (a long sum: N*OH*OW terms)."""
    t = cuda.grid(1)
    o, cg, kh, kw = dw.shape
    if t >= o * cg * kh * kw:
        return
    oc, cl, p, q = unravel4(t, cg, kh, kw)
    ci = (oc // (o // groups)) * cg + cl
    n, _, h, wd = x.shape
    oh, ow = dy.shape[2], dy.shape[3]
    s = 0.0
    for b in range(n):
        for i in range(oh):
            u = i * sh + p * dil_h - ph
            if u < 0 or u >= h:
                continue
            for j in range(ow):
                v = j * sw + q * dil_w - pw
                if 0 <= v < wd:
                    s += widen(dy[b, oc, i, j]) * widen(x[b, ci, u, v])
    dw[oc, cl, p, q] = s


def conv2d_forward_direct(
    y, x, w, sh, sw, ph, pw, groups=1, dil_h=1, dil_w=1, ph_end=None, pw_end=None, *, stream=0
):
    """y[n,o,i,j] = sum_{c,p,q} w[o,c,p,q] x[n,c,i*sh+p*dil_h-ph,j*sw+q*dil_w-pw].
    Writes y; no workspace; one thread per element of y."""
    geometry = (sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end)
    args = _check_conv("conv2d_forward_direct", y, x, w, *geometry)
    launch_1d(_forward_direct_kernel, y.size, stream, y, x, w, *args)


def conv2d_backward_data_direct(
    dx, dy, w, sh, sw, ph, pw, groups=1, dil_h=1, dil_w=1, ph_end=None, pw_end=None, *, stream=0
):
    """dx[n,c,h,v] = sum_{o,p,q,i,j: h=i*sh+p*dil_h-ph, v=j*sw+q*dil_w-pw} w[o,c,p,q]
    dy[n,o,i,j]. Overwrites dx; one thread per element of dx (a gather: no atomics)."""
    geometry = (sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end)
    args = _check_conv("conv2d_backward_data_direct", dy, dx, w, *geometry)
    launch_1d(_backward_data_direct_kernel, dx.size, stream, dx, dy, w, *args)


def conv2d_backward_filter_direct(
    dw, dy, x, sh, sw, ph, pw, groups=1, dil_h=1, dil_w=1, ph_end=None, pw_end=None, *, stream=0
):
    """dw[o,c,p,q] = sum_{n,i,j} dy[n,o,i,j] x[n,c,i*sh+p*dil_h-ph,j*sw+q*dil_w-pw].
    Overwrites dw; one thread per element of dw; float64 sums."""
    geometry = (sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end)
    args = _check_conv("conv2d_backward_filter_direct", dy, x, dw, *geometry)
    launch_1d(_backward_filter_direct_kernel, dw.size, stream, dw, dy, x, *args)


# ---------------------------------------------------------------- im2col / col2im
@kernel(*each_float(f"void({A2}, {A4}, {_UNFOLD})"))
def _im2col_kernel(cols, x, kh, kw, sh, sw, ph, pw):
    """Thread t: cols[r, col] with t = r * ncols + col."""
    t = cuda.grid(1)
    nrow, ncol = cols.shape
    if t >= nrow * ncol:
        return
    r = t // ncol
    col = t % ncol
    nb, c, h, wd = x.shape
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (wd + 2 * pw - kw) // sw + 1
    ci = r // (kh * kw)
    p = (r // kw) % kh
    q = r % kw
    b = col // (oh * ow)
    i = (col // ow) % oh
    j = col % ow
    u = i * sh + p - ph
    v = j * sw + q - pw
    if 0 <= u < h and 0 <= v < wd:
        cols[r, col] = x[b, ci, u, v]
    else:
        cols[r, col] = 0


@kernel(*each_float(f"void({A4}, {A2}, {_UNFOLD})"))
def _col2im_kernel(x, cols, kh, kw, sh, sw, ph, pw):
    """Thread t: x[b, c, u, v] = sum of the cols entries im2col reads from it, in (p, q) order
    (the CPU's order, so the float sums agree bit for bit)."""
    t = cuda.grid(1)
    nb, c, h, wd = x.shape
    if t >= nb * c * h * wd:
        return
    b, ci, u, v = unravel4(t, c, h, wd)
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (wd + 2 * pw - kw) // sw + 1
    acc = acc_zero(x)
    for p in range(kh):
        ii = u + ph - p
        if ii < 0 or ii % sh != 0 or ii // sh >= oh:
            continue
        for q in range(kw):
            jj = v + pw - q
            if jj >= 0 and jj % sw == 0 and jj // sw < ow:
                acc += widen(cols[(ci * kh + p) * kw + q, (b * oh + ii // sh) * ow + jj // sw])
    x[b, ci, u, v] = acc


@kernel(*each_float(f"void({A3}, {A3})"))
def _swap01_kernel(out, x):
    """out[j, i, k] = x[i, j, k] for x (A, B, L), out (B, A, L). Thread t: element t of out
    (writes coalesced; reads run along k, contiguous too)."""
    t = cuda.grid(1)
    nb, na, nl = out.shape
    if t < nb * na * nl:
        k = t % nl
        i = (t // nl) % na
        j = t // (nl * na)
        out[j, i, k] = x[i, j, k]


def _check_unfold(name, x, cols, kh, kw, sh, sw, ph, pw):
    check_device(name, ndim=4, x=x)
    check_device(name, ndim=2, cols=cols)
    float_dtype(name, x=x, cols=cols)
    nb, c, h, wd = x.shape
    _, _, oh, ow = conv2d_output_shape(nb, c, h, wd, 1, kh, kw, sh, sw, ph, pw)
    if cols.shape != (c * kh * kw, nb * oh * ow):
        raise ValueError(f"{name}: cols must have shape (C*KH*KW, N*OH*OW)")
    return tuple(int(a) for a in (kh, kw, sh, sw, ph, pw))


def im2col(cols, x, kh, kw, sh, sw, ph, pw, *, stream=0):
    """cols[(c*KH+p)*KW+q, (b*OH+i)*OW+j] = x[b,c,i*sh+p-ph,j*sw+q-pw] or 0.
    Writes cols (C*KH*KW, B*OH*OW); one thread per element of cols."""
    args = _check_unfold("im2col", x, cols, kh, kw, sh, sw, ph, pw)
    launch_1d(_im2col_kernel, cols.size, stream, cols, x, *args)


def col2im(x, cols, kh, kw, sh, sw, ph, pw, *, stream=0):
    """x[b,c,h,v] = sum of the cols entries im2col would read from x[b,c,h,v].
    Overwrites x; one thread per element of x (a gather: no atomics)."""
    args = _check_unfold("col2im", x, cols, kh, kw, sh, sw, ph, pw)
    launch_1d(_col2im_kernel, x.size, stream, x, cols, *args)


def _swap01(out, x, stream):
    launch_1d(_swap01_kernel, out.size, stream, out, x)


# ---------------------------------------------------------------- im2col + GEMM
def _gemm_setup(name, y, x, w, workspace, sh, sw, ph, pw):
    """Validate a GEMM pass; return (K, L, samples per group) as kernels/cpu/conv.py does."""
    _check_conv(name, y, x, w, sh, sw, ph, pw)
    check_device(name, ndim=1, workspace=workspace)
    float_dtype(name, x=x, workspace=workspace)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    k = c * kh * kw
    oh, ow = y.shape[2], y.shape[3]
    npix = oh * ow  # L = OH*OW, output pixels per sample
    group = conv2d_gemm_sample_group(n, oh, ow, "cuda")  # at least 1: no zero step when N == 0
    per = (k + o) * npix
    if workspace.size < group * per:
        raise ValueError(
            f"{name}: workspace has {workspace.size} elements but a group of {group} samples "
            f"needs {group * per} (conv2d_gemm_sample_group samples of (C*KH*KW + O)*OH*OW = "
            f"({c}*{kh}*{kw} + {o})*{npix}): the pass multiplies whole groups"
        )
    return k, npix, group


# The workspace cut into cols and the transposed-channel buffer: the CPU kernels' helper
# (slicing and reshaping a device array make views: nothing is allocated on the device).
_chunk_views = cpu_conv._chunk_views


def conv2d_forward_gemm(y, x, w, workspace, sh, sw, ph, pw, *, stream=0):
    """y = conv2d(x, w) via im2col + one GEMM per group of samples.
    Writes y; uses workspace (>= one group, 1-D, x.dtype)."""
    k, npix, group = _gemm_setup("conv2d_forward_gemm", y, x, w, workspace, sh, sw, ph, pw)
    n = x.shape[0]
    o, _, kh, kw = w.shape
    wm = w.reshape(o, k)
    for n0 in range(0, n, group):
        b = min(group, n - n0)
        cols, tbuf = _chunk_views(workspace, k, o, npix, b)
        im2col(cols, x[n0 : n0 + b], kh, kw, sh, sw, ph, pw, stream=stream)
        if b == 1:
            gemm(y[n0].reshape(o, npix), wm, cols, False, False, False, stream)
        else:
            gemm(tbuf, wm, cols, False, False, False, stream)
            _swap01(y[n0 : n0 + b].reshape(b, o, npix), tbuf.reshape(o, b, npix), stream)


def conv2d_backward_data_gemm(dx, dy, w, workspace, sh, sw, ph, pw, *, stream=0):
    """dx = adjoint of conv2d w.r.t. x via GEMM + col2im per group of samples.
    Overwrites dx; uses workspace like the forward."""
    k, npix, group = _gemm_setup("conv2d_backward_data_gemm", dy, dx, w, workspace, sh, sw, ph, pw)
    n = dx.shape[0]
    o, _, kh, kw = w.shape
    wm = w.reshape(o, k)
    for n0 in range(0, n, group):
        b = min(group, n - n0)
        cols, tbuf = _chunk_views(workspace, k, o, npix, b)
        if b == 1:
            dyt = dy[n0].reshape(o, npix)
        else:
            dyt = tbuf
            _swap01(dyt.reshape(o, b, npix), dy[n0 : n0 + b].reshape(b, o, npix), stream)
        gemm(cols, wm, dyt, True, False, False, stream)  # cols = W^T @ dY'
        col2im(dx[n0 : n0 + b], cols, kh, kw, sh, sw, ph, pw, stream=stream)


def conv2d_backward_filter_gemm(dw, dy, x, workspace, sh, sw, ph, pw, *, stream=0):
    """dw = adjoint of conv2d w.r.t. w via im2col + GEMM, the groups added into dw in order.
    Overwrites dw; uses workspace."""
    k, npix, group = _gemm_setup(
        "conv2d_backward_filter_gemm", dy, x, dw, workspace, sh, sw, ph, pw
    )
    n = x.shape[0]
    o, _, kh, kw = dw.shape
    dwm = dw.reshape(o, k)
    if n == 0:  # an empty batch: no group writes dw, and its gradient is zero
        fill(dw.reshape(-1), 0.0, stream=stream)
    for n0 in range(0, n, group):
        b = min(group, n - n0)
        cols, tbuf = _chunk_views(workspace, k, o, npix, b)
        im2col(cols, x[n0 : n0 + b], kh, kw, sh, sw, ph, pw, stream=stream)
        if b == 1:
            dyt = dy[n0].reshape(o, npix)
        else:
            dyt = tbuf
            _swap01(dyt.reshape(o, b, npix), dy[n0 : n0 + b].reshape(b, o, npix), stream)
        gemm(dwm, dyt, cols, False, True, n0 > 0, stream)  # dW (+)= dY' @ cols^T
