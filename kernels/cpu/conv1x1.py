"""1x1 convolutions without padding, any stride (ResNet's projection shortcuts and bottlenecks):
straight on the planes, the forward and backward data on the register tiles, backward filter
in the channel lanes (with a stride) or in GEMMs.

y[n,o,i,j] = sum_c w[o,c] x[n,c,i*sh,j*sw]: with xs[n] the (C, OH*OW) matrix of the pixels the
stride keeps, each sample's pass is one matrix product,

    forward:          y[n] (O, L)  = W (O, C) @ xs[n] (C, L)
    backward data:    dxs[n] (C, L) = W^T (C, O) @ dy[n] (O, L)    (dx zero off the kept pixels)
    backward filter:  dW (O, C)   = sum_n dy[n] (O, L) @ xs[n]^T (L, C)

(L = OH*OW). Why a kernel of its own. The im2col + GEMM path (conv.py) copies x into columns
(for a 1x1 filter, x itself with samples and channels swapped), multiplies, and transposes the
product back: two copies of data that, with stride 1, already lie the way the GEMM reads them
(x[n] is a C-contiguous (C, H*W) matrix, y[n] an (O, H*W) one). Here stride 1 copies nothing,
and stride 2 only gathers the kept pixels, a quarter of x, into the workspace (and backward
data scatters them back).

The forward and backward data run on conv3x3's register tiles with one tap (_tiles.py's
pointwise_tiles: 8 output planes by 2 vectors of pixels a tile, a plane of pixels one row),
where a plane holds a vector, for float32 and float64: on ResNet-20's shortcuts and two
ResNet-50 1x1 layers they ran 1.8-2.8x faster than one OpenBLAS GEMM a sample (bench/conv.py,
2-core AMD EPYC), whose fixed cost weighs on products this small. Elsewhere each sample's
product is one single-threaded OpenBLAS GEMM (blas.py), the samples spread over Numba's
threads (as gemm.py's chunks are). Backward filter cuts dW into blocks of rows
(filters) or of columns (channels), whichever dW has more of, gemm.py's chunks wide (at least
64, at most 16 blocks: products big enough for OpenBLAS's kernels; blocks of 8 filters were
measured 2.7x slower on ResNet-50's 256-channel bottleneck), one task each, that add every
sample's product into their block in sample order (BLAS's beta = 1). That is one task on
ResNet-20's shortcuts (32 x 16 and 64 x 32 filters), one thread of two idle. So with a stride,
where the kept pixels are gathered anyway, they are gathered as rows of C channels (xst[n, u,
c]), and where C is a multiple of the lanes backward filter sums in the channel lanes
(channel_lanes: eight filters by a vector of channels a task, dy's values broadcast, the
register tile of the forward). On ResNet-20's shortcuts at batch 32 (2-core AMD EPYC, the
two in turn): 0.109 against 0.216 ms (16 channels of 32x32 to 32 filters), 0.094 against
0.225 (32 of 16x16 to 64); 2.98 against 3.45 ms on 256 channels of 16x16 to 512 filters.

Workspace: ``conv1x1_workspace_per_sample`` elements per sample (kernels/sizes.py): the kept
pixels xs[n] (or dxs[n], or xst[n]), C*OH*OW; none with stride 1. The batch runs in chunks of
as many samples as the workspace holds.

Determinism: every sum of the tiles is one chain of fused multiply-adds over the channels;
every product has a shape fixed by the geometry (one sample, one block of filters), runs on
one thread and sums in a fixed order, and backward filter adds the samples in order (in the
lanes: each sample's sum of a dw entry is one lane's chain over its pixels from zero, added to
the running sum, which a later chunk reads back from dw exactly): neither the thread count
nor the workspace size changes a bit. Which of the two backward filters runs follows the
stride and the lanes of the CPU, as OpenBLAS's kernels follow the CPU. Without NumPy's OpenBLAS
(blas.MISSING), ``np.matmul`` makes each product, on one thread at a time.
"""

import numpy as np
from numba import prange

from ..sizes import conv1x1_workspace_per_sample
from . import blas
from ._jit import njit
from ._simd import lanes, vadd, vload, vstore
from ._tiles import fma_planes, lanes_of, planes, pointwise, zeros
from .gemm import gemm_chunk


def _products(blas_gemm, ta, m, n, k, a, lda, b, b_step, c, c_step, count, size):
    """c_i (M, N) = op(a) (M, K) @ b_i (K, N) for i < count, b_i and c_i C-contiguous `b_step`
    and `c_step` elements apart (addresses in bytes, steps in elements of `size` bytes): one
    single-threaded GEMM per sample, parallel over the samples."""
    for i in prange(count):
        b_at, c_at = b + i * b_step * size, c + i * c_step * size
        blas_gemm(blas.ROW_MAJOR, ta, blas.NO_TRANS, m, n, k, 1.0, a, lda, b_at, n, 0.0, c_at, n)


def _summed_products(
    blas_gemm, by_rows, m, n, k, a, a_step, b, b_step, c, count, chunk, size, beta
):
    """c (M, N) (+)= sum_i a_i (M, K) @ b_i^T (N, K), the samples i < count added in order
    (beta 1 after the first; `beta` for the first), one task per block of `chunk` rows of c
    (by_rows) or of `chunk` columns."""
    extent = m if by_rows else n
    for t in prange((extent + chunk - 1) // chunk):
        lo = t * chunk
        width = min(extent, lo + chunk) - lo
        rows, cols = (width, n) if by_rows else (m, width)
        a_lo, b_lo = (lo * k, 0) if by_rows else (0, lo * k)
        c_at = c + (lo * n if by_rows else lo) * size
        for i in range(count):
            a_at = a + (i * a_step + a_lo) * size
            b_at = b + (i * b_step + b_lo) * size
            first = beta if i == 0 else 1.0
            blas_gemm(
                blas.ROW_MAJOR, blas.NO_TRANS, blas.TRANS, rows, cols, k, 1.0, a_at, k, b_at, k,
                first, c_at, n,
            )  # fmt: skip


# One compiled function per dtype: Numba would run the float32 one for dgemm as well (gemm.py)
PRODUCTS = {
    np.dtype(np.float32): ("sgemm", njit(parallel=True, cache=True)(_products)),
    np.dtype(np.float64): ("dgemm", njit(parallel=True, cache=True)(_products)),
}
SUMMED_PRODUCTS = {
    np.dtype(np.float32): ("sgemm", njit(parallel=True, cache=True)(_summed_products)),
    np.dtype(np.float64): ("dgemm", njit(parallel=True, cache=True)(_summed_products)),
}


def _gather(xs, x, sh, sw):
    """xs[n, c] = the pixels x[n, c, i*sh, j*sw] (a copy, parallel over the planes)."""
    nb, c, oh, ow = xs.shape
    for t in prange(nb * c):
        n, ci = t // c, t % c
        for i in range(oh):
            for j in range(ow):
                xs[n, ci, i, j] = x[n, ci, i * sh, j * sw]


def _scatter(dx, dxs, sh, sw):
    """dx[n, c] = dxs[n, c] at the pixels (i*sh, j*sw), zero elsewhere (parallel over planes)."""
    nb, c, h, wd = dx.shape
    oh, ow = dxs.shape[2], dxs.shape[3]
    for t in prange(nb * c):
        n, ci = t // c, t % c
        for i in range(h):
            for j in range(wd):
                dx[n, ci, i, j] = 0
        for i in range(oh):
            for j in range(ow):
                dx[n, ci, i * sh, j * sw] = dxs[n, ci, i, j]


def _gather_rows(xst, x, sh, sw):
    """xst[n, i*OW + j, c] = x[n, c, i*sh, j*sw]: the kept pixels, each a row of its C
    channels (the channel lanes' layout; a copy, parallel over the output rows)."""
    nb, c, h, wd = x.shape
    ow = (wd - 1) // sw + 1
    oh = xst.shape[1] // ow
    for t in prange(nb * oh):
        n, i = t // oh, t % oh
        for j in range(ow):
            for ci in range(c):
                xst[n, i * ow + j, ci] = x[n, ci, i * sh, j * sw]


def _added(run, acc):
    """run[k] + acc[k] for the TILE_PLANES sums of a tile."""
    return (
        vadd(run[0], acc[0]), vadd(run[1], acc[1]), vadd(run[2], acc[2]),
        vadd(run[3], acc[3]), vadd(run[4], acc[4]), vadd(run[5], acc[5]),
        vadd(run[6], acc[6]), vadd(run[7], acc[7]),
    )  # fmt: skip


added = njit(inline="always", cache=True)(_added)


def _channel_lanes(dw, dy, xst, accumulate):
    """dw[o, c] = sum_n (sum_u dy[n, o, u] * xst[n, u, c]), or dw + that (accumulate: a later
    chunk), dy (N, O, OH*OW) and xst (N, OH*OW, C) from gather_rows, C a multiple of the
    lanes. A task keeps, for one vector of channels and eight filters (the tile of _tiles.py,
    the channels in the lanes), each sample's eight sums (one chain of fused multiply-adds
    over its pixels in order, from zero, whose other factor is dy's value broadcast) and
    eight running sums, to which each sample's are added in sample order: one lane's
    sums never meet another's. Parallel over (vector of channels, eight filters)."""
    o, c = dw.shape[0], dw.shape[1]
    nb, npix = xst.shape[0], xst.shape[1]
    nl = lanes_of(dw)
    flat = dw.reshape(o * c)
    vectors = c // nl
    for t in prange(vectors * ((o + 7) // 8)):
        c0, o0 = (t % vectors) * nl, (t // vectors) * 8
        a = planes(o0, o)  # the tile's eight filters, the last one repeated past O
        run = zeros(dw)
        if accumulate:
            run = (
                vload(flat, a[0] * c + c0), vload(flat, a[1] * c + c0),
                vload(flat, a[2] * c + c0), vload(flat, a[3] * c + c0),
                vload(flat, a[4] * c + c0), vload(flat, a[5] * c + c0),
                vload(flat, a[6] * c + c0), vload(flat, a[7] * c + c0),
            )  # fmt: skip
        for n in range(nb):
            acc = zeros(dw)
            for u in range(npix):
                f = (
                    dy[n, a[0], u], dy[n, a[1], u], dy[n, a[2], u], dy[n, a[3], u],
                    dy[n, a[4], u], dy[n, a[5], u], dy[n, a[6], u], dy[n, a[7], u],
                )  # fmt: skip
                acc = fma_planes(acc, f, vload(xst, (n * npix + u) * c + c0))
            run = added(run, acc)
        for k in range(min(8, o - o0)):
            vstore(flat, (o0 + k) * c + c0, run[k])


gather = njit(parallel=True, cache=True)(_gather)
gather_rows = njit(parallel=True, cache=True)(_gather_rows)
channel_lanes = njit(parallel=True, cache=True)(_channel_lanes)


def in_lanes(dw, sh, sw):
    """Does backward filter run in the channel lanes: with a stride (its kept pixels are
    gathered anyway, here as rows of channels), float32 or float64, C a multiple of the
    lanes?"""
    return (
        (sh, sw) != (1, 1)
        and dw.dtype in (np.float32, np.float64)
        and dw.shape[1] % lanes(dw.dtype) == 0
    )


scatter = njit(parallel=True, cache=True)(_scatter)


def _check(name, y, x, w, workspace, sh, sw):
    """Shapes, dtypes and contiguity; returns samples per chunk of the workspace."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    if w.shape != (o, c, 1, 1):
        raise ValueError(f"{name}: w must have shape (O, C, 1, 1), not {w.shape}")
    oh, ow = (h - 1) // sh + 1, (wd - 1) // sw + 1
    if y.shape != (n, o, oh, ow):
        raise ValueError(f"{name}: y must have shape (N, O, (H-1)//sh+1, (W-1)//sw+1)")
    for arr in (y, x, w, workspace):
        if arr.dtype != x.dtype or not arr.flags.c_contiguous:
            raise ValueError(f"{name}: every array must be C-contiguous {x.dtype}")
    per = conv1x1_workspace_per_sample(c, h, wd, sh, sw)
    if per == 0:
        return max(n, 1)
    if workspace.ndim != 1 or workspace.size < per:
        raise ValueError(
            f"{name}: the workspace has {workspace.size} elements, one sample needs {per}; "
            "give it conv1x1_workspace_per_sample elements per sample"
        )
    return workspace.size // per


def _forward(out, source, w, trans):
    """out[n] = op(w) @ source[n] for every sample, op the transpose when `trans`: on the
    register tiles where a plane holds a vector (float32 and float64), else one GEMM a
    sample."""
    n, k = source.shape[0], source.shape[1]
    m, npix = out.shape[1], out.shape[2] * out.shape[3]
    if pointwise(out.reshape(n, m, npix), source.reshape(n, k, npix), w, npix, trans):
        return
    wm = w.reshape(w.shape[0], w.shape[1])
    if blas.FOUND is None or out.dtype not in PRODUCTS:
        for i in range(n):
            np.matmul(
                wm.T if trans else wm, source[i].reshape(k, npix), out=out[i].reshape(m, npix)
            )
        return
    name, products = PRODUCTS[out.dtype]
    with blas.single_threaded():
        products(
            getattr(blas.FOUND, name), blas.TRANS if trans else blas.NO_TRANS, m, npix, k,
            wm.ctypes.data, wm.shape[1], source.ctypes.data, k * npix, out.ctypes.data,
            m * npix, n, out.itemsize,
        )  # fmt: skip


def _filter(dw, dy, xs, accumulate):
    """dw (+)= sum_n dy[n] @ xs[n]^T, the samples added in order."""
    n, o, c = dy.shape[0], dw.shape[0], dw.shape[1]
    npix = dy.shape[2] * dy.shape[3]
    dwm = dw.reshape(o, c)
    if blas.FOUND is None or dw.dtype not in SUMMED_PRODUCTS:
        for i in range(n):
            product = dy[i].reshape(o, npix) @ xs[i].reshape(c, npix).T
            dwm[...] = dwm + product if accumulate or i > 0 else product
        return
    name, summed = SUMMED_PRODUCTS[dw.dtype]
    by_rows = o > c
    with blas.single_threaded():
        summed(
            getattr(blas.FOUND, name), by_rows, o, c, npix, dy.ctypes.data, o * npix,
            xs.ctypes.data, c * npix, dwm.ctypes.data, n, gemm_chunk(o if by_rows else c),
            dw.itemsize, 1.0 if accumulate else 0.0,
        )  # fmt: skip


def conv1x1_forward(y, x, w, workspace, sh, sw):
    """y = conv2d(x, w), 1x1, stride (sh, sw), no padding. Writes y; uses workspace."""
    b = _check("conv1x1_forward", y, x, w, workspace, sh, sw)
    n, c = x.shape[0], x.shape[1]
    oh, ow = y.shape[2], y.shape[3]
    for n0 in range(0, n, b):
        chunk = x[n0 : n0 + b]
        if (sh, sw) != (1, 1):
            xs = workspace[: chunk.shape[0] * c * oh * ow].reshape(chunk.shape[0], c, oh, ow)
            gather(xs, chunk, sh, sw)
            chunk = xs
        _forward(y[n0 : n0 + b], chunk, w, False)


def conv1x1_backward_data(dx, dy, w, workspace, sh, sw):
    """dx = adjoint of conv1x1 w.r.t. x. Overwrites dx; uses workspace."""
    b = _check("conv1x1_backward_data", dy, dx, w, workspace, sh, sw)
    n, c = dx.shape[0], dx.shape[1]
    oh, ow = dy.shape[2], dy.shape[3]
    for n0 in range(0, n, b):
        if (sh, sw) == (1, 1):
            _forward(dx[n0 : n0 + b], dy[n0 : n0 + b], w, True)
            continue
        nb = min(b, n - n0)
        dxs = workspace[: nb * c * oh * ow].reshape(nb, c, oh, ow)
        _forward(dxs, dy[n0 : n0 + b], w, True)
        scatter(dx[n0 : n0 + b], dxs, sh, sw)


def conv1x1_backward_filter(dw, dy, x, workspace, sh, sw):
    """dw = adjoint of conv1x1 w.r.t. w, the samples' products added in order. Overwrites dw;
    uses workspace."""
    b = _check("conv1x1_backward_filter", dy, x, dw, workspace, sh, sw)
    n, c = x.shape[0], x.shape[1]
    oh, ow = dy.shape[2], dy.shape[3]
    if n == 0:  # no sample writes dw: an empty batch's gradient is zero
        dw[...] = 0
    lanes_path = in_lanes(dw, sh, sw)
    for n0 in range(0, n, b):
        chunk = x[n0 : n0 + b]
        nb = chunk.shape[0]
        if lanes_path:
            xst = workspace[: nb * c * oh * ow].reshape(nb, oh * ow, c)
            gather_rows(xst, chunk, sh, sw)
            dy3 = dy[n0 : n0 + b].reshape(nb, dy.shape[1], oh * ow)
            channel_lanes(dw, dy3, xst, n0 > 0)
            continue
        if (sh, sw) != (1, 1):
            xs = workspace[: nb * c * oh * ow].reshape(nb, c, oh, ow)
            gather(xs, chunk, sh, sw)
            chunk = xs
        _filter(dw, dy[n0 : n0 + b], chunk, n0 > 0)
