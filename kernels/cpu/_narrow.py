"""conv3x3's forward and backward data where a vector holds whole rows of a plane: planes
narrower than a vector (the 8x8 planes of ResNet's last stage: two rows a float32 vector with
AVX-512; 4x4 planes: four).

Why a layout of its own. conv3x3's padded planes put two zero columns on every row, so that
no tap needs a bounds test; where a row is narrower than a vector, the tiles then sum each
plane as one long row as long as the padded ones (_tiles.py): an 8x8 plane's 64 pixels are 80
sums in five vectors, a fifth of the multiply-adds on the padding's columns, and unpad_rows
copies the sums out. Here the rows keep their own width W:

    plane = one zero, a zero row, the H rows of x W apart, a zero row, one zero
            ((H + 2)*W + 2 elements)

and tap (p, q) of output pixel (i, j) reads element (i + p)*W + j + q: the padded planes'
formula with W in place of W + 2. A vector of consecutive output pixels holds lanes / W
whole rows, and each tap is one vector read, shifted. What the zero columns gave, a mask gives:
tap q = 0 at column 0 reads the previous row's last pixel, tap q = 2 at column W - 1 the next
row's first, and those lanes are set to zero (_simd.vkeep: a select, the padding's exact +0,
never v * 0, which would make an infinity NaN). The sums go straight into the output, four
vectors an 8x8 plane.

Measured on the 2-core AMD EPYC (batch 32, the median of 150 calls of the whole forward pass,
copies included, this layout and the row-padded sums in turn in one process): 64 channels of
8x8 0.45 against 0.54 ms in float32, 128 of 4x4 0.48 against 0.85 ms, 64 of 4x4 in float64
0.25 against 0.48 ms; where a row holds a vector (32 channels of 16x16) the masks cost more
than the padding columns: 0.45 against 0.41 ms, so the padded planes stay there. A compiled
ResNet-20 step (graph mode), the two switched step by step: 1.015x; ResNet-56 1.015x.

Bits: each sum is tiles_forward's chain of fused multiply-adds over (b, p, q) from zero, and a
masked lane multiplies the same zero that the padding holds: the same bits as the row-padded
sums (tested), on any thread count.

Workspace: (H + 2)*W + 2 elements an input plane of a sample, less than conv3x3_forward_need
(kernels/sizes.py), which is sized for the padded layout that the other CPUs and the CUDA
kernels use; the rest of the need goes unused here.
"""

import functools

import numpy as np
from numba import prange

from ._jit import by_size, njit
from ._simd import lanes, vkeep, vload
from ._tiles import filters, fma_planes, grid, lanes_of, planes, store_tile, tile_at, zeros

# Non-negative indices as unsigned: Numba then drops its negative-index wraparound.
_u = np.uint64


def applies(out):
    """Do the narrow planes compute this output (N, A, H, W)? Where its rows are narrower than
    a vector, a vector holds whole rows (W divides the lanes) and a plane whole vectors, and
    the output is C-contiguous float32 or float64 (the sums go straight into it)."""
    if out.dtype not in (np.float32, np.float64) or not out.flags.c_contiguous:
        return False
    nl, h, wd = lanes(out.dtype), out.shape[2], out.shape[3]
    return wd < nl and nl % wd == 0 and (h * wd) % nl == 0


def plane(h, w):
    """Elements of one narrow plane: (H + 2)*W + 2."""
    return (h + 2) * w + 2


def _spread(planes_, x):
    """planes_[n, c] = x[n, c]'s narrow plane (the module's docstring). A copy, memory-bound:
    parallel over the planes from PARALLEL_FROM elements of x (by_size), serial below."""
    nb, c, h, wd = x.shape
    first = wd + 1  # past the leading zero and the zero row
    for t in prange(nb * c):
        n, ci = t // c, t % c
        p = planes_[n, ci]
        for u in range(first):
            p[u] = 0
        for i in range(h):
            for j in range(wd):
                p[_u(first + i * wd + j)] = x[n, ci, i, j]
        for u in range(first + h * wd, p.size):
            p[u] = 0


spread = by_size(_spread, on=1)


def _narrow_tiles(dst, padded, w, flipped, wd, left, right):
    """dst[n, a, u] = sum_{b,p,q} f[a,b,p,q] padded[n, b, u + p*W + q] for each vector of
    pixels u of dst's planes (flat, H*W), the lanes of taps q = 0 and q = 2 kept by the masks
    `left` and `right` (bit l: lane l); f as in tiles_forward (w, or flipped for backward
    data). tiles_forward's tile, tiling and order. Parallel over tiles; writes dst only."""
    nb, na = dst.shape[0], dst.shape[1]
    ni = padded.shape[1]
    nl = lanes_of(dst)
    width = dst.shape[2]
    per_row, vectors, paired, units, tiles, blocks = grid(dst, 1, width)
    for t in prange(units * blocks * tiles):
        n0, n1, a0, s0, d0, s1, d1 = tile_at(
            t, tiles, blocks, vectors, per_row, width, nl, 0, 0, paired, nb
        )
        a = planes(a0, na)
        acc0 = zeros(dst)
        acc1 = zeros(dst)
        for b in range(ni):
            src0, src1 = padded[n0, b], padded[n1, b]
            for p in range(3):
                row = p * wd
                f = filters(w, a, b, p, 0, flipped)
                acc0 = fma_planes(acc0, f, vkeep(vload(src0, s0 + row), left))
                acc1 = fma_planes(acc1, f, vkeep(vload(src1, s1 + row), left))
                f = filters(w, a, b, p, 1, flipped)
                acc0 = fma_planes(acc0, f, vload(src0, s0 + row + 1))
                acc1 = fma_planes(acc1, f, vload(src1, s1 + row + 1))
                f = filters(w, a, b, p, 2, flipped)
                acc0 = fma_planes(acc0, f, vkeep(vload(src0, s0 + row + 2), right))
                acc1 = fma_planes(acc1, f, vkeep(vload(src1, s1 + row + 2), right))
        store_tile(dst, n0, n1, a0, d0, d1, acc0, acc1)


narrow_tiles = njit(parallel=True, cache=True)(_narrow_tiles)


def forward_narrow(out, source, w, workspace, flipped):
    """out (N, A, H, W) = conv3x3 of source (N, B, H, W) with w, or with w flipped (backward
    data), through source's narrow planes at the start of workspace. Writes out (and
    N*B*plane(H, W) elements of workspace)."""
    nb, ni, h, wd = source.shape
    padded = workspace[: nb * ni * plane(h, wd)].reshape(nb, ni, plane(h, wd))
    spread(padded, source)
    left, right = masks(lanes(out.dtype), wd)
    narrow_tiles(out.reshape(nb, out.shape[1], h * wd), padded, w, flipped, wd, left, right)


@functools.lru_cache(maxsize=None)
def masks(nl, wd):
    """(left, right): the lanes that taps q = 0 and q = 2 keep in a vector of `nl` pixels of
    rows `wd` wide (bit l: lane l), every lane but those of column 0, and of column W - 1. A
    few pairs a process: made once, not at every pass."""
    left = sum(1 << lane for lane in range(nl) if lane % wd != 0)
    right = sum(1 << lane for lane in range(nl) if lane % wd != wd - 1)
    return left, right
