"""2-D convolution (NCHW, no bias): direct and im2col+GEMM algorithms.

Forward: y[n,o,i,j] = sum_{c,p,q} w[o,c,p,q] * x[n,c,i*sh+p-ph, j*sw+q-pw]  (zero padding).
The two backward kernels are its adjoints with respect to x (data) and w (filter).

Dilation and asymmetric padding (the direct kernels' arguments after `groups`, as ONNX's Conv
has them): tap (p, q) reads x[n, c, i*sh + p*dil_h - ph, j*sw + q*dil_w - pw], and the padding
after the input (ph_end rows below, pw_end columns right; None: ph and pw) only sets the output
size, which the kernels check. The GEMM kernels take dilation 1 and symmetric padding.

Groups (the direct kernels' last argument, default 1): the C input channels and O filters are
split into `groups` equal parts and filter o sees only the C/groups channels of its part, so w
is (O, C/groups, KH, KW): filter o, channel c of its part reads x channel
(o // (O/groups)) * (C/groups) + c. groups = C is a depthwise convolution (Xception's separable
convolutions). The GEMM kernels take groups = 1.

Direct algorithm: loops only, no workspace, parallel over independent outputs
(planes of y / dx, filters of dw); every output is summed in a fixed order.

im2col + GEMM algorithm: the batch is processed in sample groups of B samples; a
group is unfolded into a column matrix and each pass becomes ONE large GEMM.

cols layout (im2col / col2im): a 2-D C-contiguous array of shape
(C*KH*KW, B*OH*OW) with
    cols[(c*KH + p)*KW + q, (b*OH + i)*OW + j] = x[b, c, i*sh+p-ph, j*sw+q-pw]  (0 in the padding).
Rows follow w.reshape(O, C*KH*KW) and columns run over samples then output pixels, so
    forward:          Y' (O, B*L)   = W (O, K) @ cols (K, B*L)
    backward data:    cols (K, B*L) = W^T (K, O) @ dY' (O, B*L), then col2im
    backward filter:  dW (O, K)   (+)= dY' (O, B*L) @ cols^T (B*L, K)
(K = C*KH*KW, L = OH*OW) are single products on views, and the only extra traffic is
the cheap (B, O, L) <-> (O, B, L) transpose of the O-channel tensor Y' / dY'
(skipped when B == 1, where Y' is y[n] itself). The forward's and backward data's products run
on the register tiles of the 1x1 convolutions (_tiles.pointwise_tiles: W as O x K filters of
1x1 over the K rows of cols) for float32 and float64, each sum one chain of fused
multiply-adds over K; OpenBLAS's sgemm, whose AVX2 kernels are all it runs on an AMD EPYC
(Zen 5), made the SINGA CNN's 5x5 layer 1.5-2.0x slower there (forward 1.75 -> 0.87 ms,
backward data 1.57 -> 1.07 ms in its training step). Backward filter's product sums over the
pixels: on the tiles too, over im2col's matrix transposed (_summed.py).

Sample groups, and why the workspace never changes the numbers: B is
conv2d_gemm_sample_group (kernels/sizes.py), fixed by the geometry and the batch (enough
samples for 1024 GEMM columns), and the groups are samples [0, B), [B, 2B), ... whatever the
workspace. A GEMM's sums depend on its shape (OpenBLAS blocks the sums over K, and picks its
kernels, by M, N and K: measured, the forward GEMM of a 5x5 convolution over 2 samples and
over 7 give different last bits for the same sample), so chunks sized to the workspace would
make the numbers depend on it. Here every GEMM has a shape fixed by the geometry, and backward
filter adds each group's product into dw in group order (BLAS's beta = 1: no room needed for a
partial product).

Workspace (1-D, same dtype as x): per sample (K + O) * L elements (cols + Y'/dY'):
conv2d_gemm_workspace_per_sample in kernels/sizes.py. A pass needs one group of them,
B * (K + O) * L elements, at the start of the workspace; a smaller workspace is refused, and a
larger one is not used beyond them.
"""

import numpy as np
from numba import prange

from ..sizes import conv2d_gemm_sample_group
from ._im2col import col2im, im2col, im2row, swap01
from ._jit import njit
from ._simd import lanes
from ._summed import summed_tiles
from ._tiles import pointwise
from ._valid import valid_forward
from ._window import output_size, valid_range
from .gemm import gemm, matmul


def _check_conv_shapes(y, x, w, sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end):
    n, c, h, wd = x.shape
    o, c2, kh, kw = w.shape
    if groups < 1 or c % groups != 0 or o % groups != 0:
        raise ValueError("conv2d: groups must divide both the channels and the filters")
    if dil_h < 1 or dil_w < 1 or ph < 0 or pw < 0 or ph_end < 0 or pw_end < 0:
        raise ValueError("conv2d: need dilation >= 1 and padding >= 0")
    oh = output_size(h, dil_h * (kh - 1) + 1, sh, ph, ph_end, False)
    ow = output_size(wd, dil_w * (kw - 1) + 1, sw, pw, pw_end, False)
    if (
        c2 * groups != c
        or y.shape[0] != n
        or y.shape[1] != o
        or y.shape[2] != oh
        or y.shape[3] != ow
        or oh < 1
        or ow < 1
    ):
        raise ValueError("conv2d: shapes of y (N,O,OH,OW), x (N,C,H,W), w (O,C,KH,KW) do not agree")


check_conv_shapes = njit(cache=True)(_check_conv_shapes)


# Indices computed as `j*sw + offset` have unknown sign to the compiler, and Numba
# then emits a negative-index wraparound select on every access, which blocks
# vectorisation (measured 5x slower im2col). The kernels only form such indices
# for in-range positions, so they cast them to unsigned: `x[..., _u(j*sw + off)]`.
_u = np.uint64


# ---------------------------------------------------------------- direct algorithm
def conv2d_forward_direct(
    y, x, w, sh, sw, ph, pw, groups=1, dil_h=1, dil_w=1, ph_end=None, pw_end=None
):
    """y[n,o,i,j] = sum_{c,p,q} w[o,c,p,q] x[n,first(o)+c,i*sh+p*dil_h-ph,j*sw+q*dil_w-pw], c
    over the C/groups channels of o's group, which start at first(o). Writes y; no workspace.
    A valid convolution with stride 1 whose output rows hold a vector runs on register tiles
    over x's own planes (_valid.valid_forward), the rest on loops parallel over (n,o)."""
    if not valid_forward(y, x, w, sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end):
        forward_direct_loops(y, x, w, sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end)


def _forward_direct_loops(
    y, x, w, sh, sw, ph, pw, groups=1, dil_h=1, dil_w=1, ph_end=None, pw_end=None
):
    """conv2d_forward_direct on loops: each output's sum over (c, p, q), a product rounded and
    added at a time. Writes y; parallel over (n,o)."""
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    check_conv_shapes(y, x, w, sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = y.shape[2], y.shape[3]
    for t in prange(n * o):
        b = t // o
        oc = t % o
        first = (oc // og) * cg
        for i in range(oh):
            for j in range(ow):
                y[b, oc, i, j] = 0
        for cl in range(cg):
            ci = first + cl
            for p in range(kh):
                i_lo, i_hi = valid_range(oh, p * dil_h, sh, ph, h)
                for q in range(kw):
                    j_lo, j_hi = valid_range(ow, q * dil_w, sw, pw, wd)
                    wv = w[oc, cl, p, q]
                    off = q * dil_w - pw
                    for i in range(i_lo, i_hi):
                        hh = i * sh + p * dil_h - ph
                        for j in range(j_lo, j_hi):
                            y[b, oc, i, _u(j)] += wv * x[b, ci, hh, _u(j * sw + off)]


def _conv2d_backward_data_direct(
    dx, dy, w, sh, sw, ph, pw, groups=1, dil_h=1, dil_w=1, ph_end=None, pw_end=None
):
    """dx[n,c,h,v] = sum_{o,p,q,i,j: h=i*sh+p*dil_h-ph, v=j*sw+q*dil_w-pw} w[o,c',p,q]
    dy[n,o,i,j], o over the filters of c's group and c' = c's index within its group.
    Overwrites dx; parallel over (n,c)."""
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    check_conv_shapes(dy, dx, w, sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end)
    n, c, h, wd = dx.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = dy.shape[2], dy.shape[3]
    for t in prange(n * c):
        b = t // c
        ci = t % c
        g = ci // cg
        cl = ci - g * cg
        for u in range(h):
            for v in range(wd):
                dx[b, ci, u, v] = 0
        for oc in range(g * og, (g + 1) * og):
            for p in range(kh):
                i_lo, i_hi = valid_range(oh, p * dil_h, sh, ph, h)
                for q in range(kw):
                    j_lo, j_hi = valid_range(ow, q * dil_w, sw, pw, wd)
                    wv = w[oc, cl, p, q]
                    off = q * dil_w - pw
                    for i in range(i_lo, i_hi):
                        hh = i * sh + p * dil_h - ph
                        for j in range(j_lo, j_hi):
                            dx[b, ci, hh, _u(j * sw + off)] += wv * dy[b, oc, i, _u(j)]


def _conv2d_backward_filter_direct(
    dw, dy, x, sh, sw, ph, pw, groups=1, dil_h=1, dil_w=1, ph_end=None, pw_end=None
):
    """dw[o,c,p,q] = sum_{n,i,j} dy[n,o,i,j] x[n,first(o)+c,i*sh+p*dil_h-ph,j*sw+q*dil_w-pw]
    (c within o's group). Overwrites dw; parallel over (o,c); float64 sums."""
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    check_conv_shapes(dy, x, dw, sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end)
    n, c, h, wd = x.shape
    o, cg, kh, kw = dw.shape
    og = o // groups
    oh, ow = dy.shape[2], dy.shape[3]
    for t in prange(o * cg):
        oc = t // cg
        cl = t % cg
        ci = (oc // og) * cg + cl
        for p in range(kh):
            i_lo, i_hi = valid_range(oh, p * dil_h, sh, ph, h)
            for q in range(kw):
                j_lo, j_hi = valid_range(ow, q * dil_w, sw, pw, wd)
                off = q * dil_w - pw
                s = 0.0
                for b in range(n):
                    for i in range(i_lo, i_hi):
                        hh = i * sh + p * dil_h - ph
                        for j in range(j_lo, j_hi):
                            s += dy[b, oc, i, _u(j)] * x[b, ci, hh, _u(j * sw + off)]
                dw[oc, cl, p, q] = s


forward_direct_loops = njit(parallel=True, cache=True)(_forward_direct_loops)
conv2d_backward_data_direct = njit(parallel=True, cache=True)(_conv2d_backward_data_direct)
conv2d_backward_filter_direct = njit(parallel=True, cache=True)(_conv2d_backward_filter_direct)


# ---------------------------------------------------------------- im2col + GEMM
def _gemm_setup(name, y, x, w, workspace, sh, sw, ph, pw):
    """Validate arguments of a GEMM pass; return (K, L, samples per group)."""
    for arr, label in ((y, "y/dy"), (x, "x/dx"), (w, "w/dw"), (workspace, "workspace")):
        if not arr.flags.c_contiguous:
            raise ValueError(f"{name}: {label} must be C-contiguous")
        if arr.dtype != x.dtype:
            raise TypeError(f"{name}: {label} has dtype {arr.dtype}, expected {x.dtype}")
    if workspace.ndim != 1:
        raise ValueError(f"{name}: workspace must be 1-D")
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    check_conv_shapes(y, x, w, sh, sw, ph, pw, 1, 1, 1, ph, pw)
    k = c * kh * kw
    oh, ow = y.shape[2], y.shape[3]
    npix = oh * ow  # L = OH*OW, output pixels per sample
    group = conv2d_gemm_sample_group(n, oh, ow, "cpu")
    per = (k + o) * npix
    if workspace.size < group * per:
        raise ValueError(
            f"{name}: workspace has {workspace.size} elements but a group of {group} samples "
            f"needs {group * per} (conv2d_gemm_sample_group samples of (C*KH*KW + O)*OH*OW = "
            f"({c}*{kh}*{kw} + {o})*{npix}): the pass multiplies whole groups"
        )
    return k, npix, group


def _chunk_views(workspace, k, o, npix, b):
    """cols (K, B*L) at the start of the workspace, then the (O, B*L) transposed-channel buffer."""
    cols = workspace[: k * b * npix].reshape(k, b * npix)
    tbuf = workspace[k * b * npix : (k + o) * b * npix].reshape(o, b * npix)
    return cols, tbuf


def _product(out, w, cols, flipped):
    """out (A, M) = W (O, K) @ cols (K, M), or W^T @ cols when flipped (A = O or K): on the
    register tiles (_tiles.pointwise_tiles, w as O x K 1x1 filters) for float32 and float64
    rows of a vector or more, else a GEMM (gemm.matmul)."""
    o, k = w.shape[0], w.shape[1] * w.shape[2] * w.shape[3]
    m = cols.shape[1]
    # the matrices as the planes of one sample
    planes_out, planes_in = out.reshape(1, out.shape[0], m), cols.reshape(1, cols.shape[0], m)
    if pointwise(planes_out, planes_in, w.reshape(o, k, 1, 1), m, flipped):
        return
    wm = w.reshape(o, k)
    matmul(out, wm.T if flipped else wm, cols)


def _dy_rows(dy, n0, b, tbuf):
    """dY' (O, B*L) of samples n0 .. n0+b-1: dy[n0] itself for one sample, else dy's planes
    gathered into tbuf (swap01)."""
    o, npix = dy.shape[1], dy.shape[2] * dy.shape[3]
    if b == 1:
        return dy[n0].reshape(o, npix)
    swap01(tbuf.reshape(o, b, npix), dy[n0 : n0 + b].reshape(b, o, npix))
    return tbuf


def conv2d_forward_gemm(y, x, w, workspace, sh, sw, ph, pw):
    """y = conv2d(x, w) via im2col + one GEMM per group of samples.
    Writes y; uses workspace (>= one group, 1-D, x.dtype)."""
    k, npix, group = _gemm_setup("conv2d_forward_gemm", y, x, w, workspace, sh, sw, ph, pw)
    n = x.shape[0]
    o, _, kh, kw = w.shape
    for n0 in range(0, n, group):
        b = min(group, n - n0)
        cols, tbuf = _chunk_views(workspace, k, o, npix, b)
        im2col(cols, x[n0 : n0 + b], kh, kw, sh, sw, ph, pw)
        if b == 1:
            _product(y[n0].reshape(o, npix), w, cols, False)
        else:
            _product(tbuf, w, cols, False)
            swap01(y[n0 : n0 + b].reshape(b, o, npix), tbuf.reshape(o, b, npix))


def conv2d_backward_data_gemm(dx, dy, w, workspace, sh, sw, ph, pw):
    """dx = adjoint of conv2d w.r.t. x via GEMM + col2im per group of samples.
    Overwrites dx; uses workspace like the forward."""
    k, npix, group = _gemm_setup("conv2d_backward_data_gemm", dy, dx, w, workspace, sh, sw, ph, pw)
    n = dx.shape[0]
    o, _, kh, kw = w.shape
    for n0 in range(0, n, group):
        b = min(group, n - n0)
        cols, tbuf = _chunk_views(workspace, k, o, npix, b)
        _product(cols, w, _dy_rows(dy, n0, b, tbuf), True)
        col2im(dx[n0 : n0 + b], cols, kh, kw, sh, sw, ph, pw)


FEW_FILTERS = 16


def conv2d_backward_filter_gemm(dw, dy, x, workspace, sh, sw, ph, pw):
    """dw = adjoint of conv2d w.r.t. w via im2col + GEMM, each group's product added into dw in
    group order. Overwrites dw; uses workspace.

    For float32 and float64 the product runs on register tiles over im2col's matrix transposed
    (_summed.py, im2row into cols' place): each dw entry one chain of fused multiply-adds over
    every pixel of the batch, continued from group to group. The SINGA CNN's layers, in one
    process against OpenBLAS's GEMM: 1.81 -> 1.26 ms (5x5, 20 -> 50 channels) and 1.42 -> 0.97
    ms (its first, one channel), batch 64 (2-core AMD EPYC). Otherwise OpenBLAS, as follows.

    With few filters (O <= FEW_FILTERS) the sums are made in the transposed orientation,
    dw^T (K,O) (+)= cols @ dyt^T, which OpenBLAS runs faster (ResNet-20's 16-filter layers,
    batch 32, the whole batch one GEMM: 4.7 against 5.9 ms; in groups of one 32x32 sample: 3.5
    against 3.8 ms of CPU time on one thread; with 20 or more filters it was slower, so they
    keep dyt @ cols^T). They go into dw's own bytes viewed as (K,O), which at the end are
    copied to the start of the workspace (the last group's cols are spent by then) and
    transposed back into dw: no memory beyond what the pass already has. Where one group's
    workspace is smaller than dw (a tiny image and a tiny batch), the direct orientation. The
    choice follows the geometry, never the workspace: the same numbers in any workspace."""
    k, npix, group = _gemm_setup(
        "conv2d_backward_filter_gemm", dy, x, dw, workspace, sh, sw, ph, pw
    )
    n = x.shape[0]
    o, _, kh, kw = dw.shape
    if n == 0:  # an empty batch: no group writes dw, and its gradient is zero
        dw[...] = 0
        return
    dwm = dw.reshape(o, k)
    # the tiles read a part-full last vector past im2row's last row, into tbuf: room for it
    if dw.dtype in (np.float32, np.float64) and o * npix >= lanes(dw.dtype):
        for n0 in range(0, n, group):
            b = min(group, n - n0)
            cols, tbuf = _chunk_views(workspace, k, o, npix, b)
            rows = cols.reshape(b * npix, k)
            im2row(rows, x[n0 : n0 + b], kh, kw, sh, sw, ph, pw)
            summed_tiles(dwm, rows, _dy_rows(dy, n0, b, tbuf), n0 > 0)
        return
    transposed = o <= FEW_FILTERS and group * (k + o) * npix >= k * o
    sums = dwm.reshape(-1).reshape(k, o) if transposed else dwm  # dw's bytes as (K, O) or (O, K)
    for n0 in range(0, n, group):
        b = min(group, n - n0)
        cols, tbuf = _chunk_views(workspace, k, o, npix, b)
        im2col(cols, x[n0 : n0 + b], kh, kw, sh, sw, ph, pw)
        dyt = _dy_rows(dy, n0, b, tbuf)
        if transposed:
            gemm(sums, cols, dyt, False, True, n0 > 0)  # dW^T (+)= cols @ dY'^T
        else:
            gemm(sums, dyt, cols, False, True, n0 > 0)  # dW (+)= dY' @ cols^T
    if transposed:
        scratch = workspace[: k * o].reshape(k, o)
        scratch[...] = sums
        dwm[...] = scratch.T
