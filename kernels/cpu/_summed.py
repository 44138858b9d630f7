"""Backward filter of im2col + GEMM (conv.py) on register tiles: dw (O, K) (+)= dY' (O, M) @
rows (M, K), summed over the M pixels of a group of samples.

    dw[o, k] = sum_u dyt[o, u] * rows[u, k]       (rows: im2row, a row of K taps per pixel)

The tile is the forward's (_tiles.py) with other roles: 8 filters (planes of dw) by 2 vectors
of consecutive k (columns of dw, in the lanes), kept in registers over the pixels u. Per pixel,
two vector reads of rows[u] and eight elements dyt[o, u] feed 16 multiply-adds. The lanes never
meet, so no sum crosses lanes: each dw[o, k] is one lane's chain of fused multiply-adds over
the pixels, the same on any vector width.

One chain over the batch. A later group of samples starts its tile from dw itself
(accumulate): each dw[o, k] is one chain over every pixel of every sample, in order, however
the batch is cut into groups, so the groups and the workspace never change a bit. A tile's
vectors lie at whole multiples of the lanes; the last vector of a row may be part full, and its
lanes past K are read from the next row of `rows` (or the workspace after it), computed, and
never written. (The forward's tiles move a row's last vector back to end at the row's end,
overlapping its neighbour; a tile that reads dw first cannot: the neighbour's task may have
written the overlap already.)

Why not OpenBLAS's sgemm, which the pass used before: on an AMD EPYC (Zen 5) it runs only its
AVX2 kernels, and the SINGA CNN's 5x5 layer (50 filters, K = 500, 1024 pixels a group) ran at
120 GFLOP/s there.
"""

import numpy as np
from numba import prange

from ._jit import njit
from ._simd import vload, vstore
from ._tiles import TILE_PLANES, TILE_VECTORS, filters, fma_planes, lanes_of, planes, zeros


def _start(dw, a, at, accumulate, scratch):
    """The tile's TILE_PLANES vectors of sums at column `at` of dw's planes a (a tuple): zeros,
    or (accumulate) dw's own values there, lanes past the row's end zero."""
    if not accumulate:
        return zeros(dw)
    if at + scratch.size <= dw.shape[1]:
        return (
            vload(dw[a[0]], at), vload(dw[a[1]], at), vload(dw[a[2]], at),
            vload(dw[a[3]], at), vload(dw[a[4]], at), vload(dw[a[5]], at),
            vload(dw[a[6]], at), vload(dw[a[7]], at),
        )  # fmt: skip
    return (
        partial(dw[a[0]], at, scratch), partial(dw[a[1]], at, scratch),
        partial(dw[a[2]], at, scratch), partial(dw[a[3]], at, scratch),
        partial(dw[a[4]], at, scratch), partial(dw[a[5]], at, scratch),
        partial(dw[a[6]], at, scratch), partial(dw[a[7]], at, scratch),
    )  # fmt: skip


def _partial(row, at, scratch):
    """row[at:] as a vector, its lanes past the row's end zero (through `scratch`)."""
    for lane in range(scratch.size):
        scratch[lane] = row[at + lane] if at + lane < row.size else 0
    return vload(scratch, 0)


def _store(dw, a0, at, acc, scratch):
    """acc[k] into dw[a0 + k] at column `at`, for the planes that exist and the lanes within
    the row (through `scratch` for a part-full vector)."""
    k, nl = dw.shape[1], scratch.size
    for p in range(min(TILE_PLANES, dw.shape[0] - a0)):
        if at + nl <= k:
            vstore(dw[a0 + p], at, acc[p])
        else:
            vstore(scratch, 0, acc[p])
            for lane in range(k - at):
                dw[a0 + p, at + lane] = scratch[lane]


partial = njit(inline="always", cache=True)(_partial)
start = njit(inline="always", cache=True)(_start)
store = njit(inline="always", cache=True)(_store)


def _summed_tiles(dw, rows, dyt, accumulate):
    """dw (+)= dyt @ rows (the module's docstring): dw (O, K), rows (M, K) with room for one
    vector read past its last row, dyt (O, M). Overwrites dw, or continues its sums
    (accumulate). Parallel over tiles, the blocks of filters innermost, so that consecutive
    tasks read the same strip of rows (M x 2 vectors) while it is in the cache."""
    o, k = dw.shape
    m = rows.shape[0]
    nl = lanes_of(dw)
    vectors = (k + nl - 1) // nl
    tiles = (vectors + TILE_VECTORS - 1) // TILE_VECTORS
    blocks = (o + TILE_PLANES - 1) // TILE_PLANES
    w = dyt.reshape(o, m, 1, 1)  # dyt[o, u] as filters() reads a 1x1 filter
    for t in prange(tiles * blocks):
        a0 = t % blocks * TILE_PLANES
        v0 = t // blocks * TILE_VECTORS
        at0, at1 = v0 * nl, min(v0 + 1, vectors - 1) * nl
        a = planes(a0, o)
        scratch = np.empty(nl, dw.dtype)
        acc0 = start(dw, a, at0, accumulate, scratch)
        acc1 = start(dw, a, at1, accumulate, scratch)
        for u in range(m):
            f = filters(w, a, u, 0, 0, False)
            acc0 = fma_planes(acc0, f, vload(rows[u], at0))
            acc1 = fma_planes(acc1, f, vload(rows[u], at1))
        store(dw, a0, at0, acc0, scratch)
        store(dw, a0, at1, acc1, scratch)


summed_tiles = njit(parallel=True, cache=True)(_summed_tiles)
