"""Register tiles: the forward sums of conv3x3 and conv3x3s2, the backward data of both, the
forward and backward data of conv1x1 (pointwise_tiles), and the direct forward of a valid
convolution with stride 1 (valid_tiles; _valid.py says when).

Both kernels lay their input out so that tap (p, q) of an output pixel is one fixed shift from
the pixel's own offset in the input's layout: conv3x3's padded planes (shift p*W2 + q, W2 = W
+ 2), conv3x3s2's four phase planes of a channel end to end (shift k*plane + (p//2)*W2 +
q//2, k = 2*(p%2) + q%2 the phase, W2 = OW + 1). So one kernel computes both:

    y[n, a, pixel] = sum_{b, p, q} w[a, b, p, q] * source[n, b, offset(pixel) + shift_pq]

where offset(i, j) = i*W2 + j. The sums are taken in vector registers (_simd.py): a tile of
two vectors of consecutive pixels of eight output planes stays in registers while the loop runs
over every input channel and tap, so each tap's two vector reads feed 16 multiply-adds, and no
sum goes through memory until the tile is done (a loop over planes, which read and wrote its
sums at every tap, ran at a half to two thirds of this speed: conv3x3.py's docstring).

Where the output's rows hold a vector (W >= lanes) and the output is C-contiguous, the tiles
write it directly, the last vector of a row moved back to end at the row's end. Otherwise the
tiles write each plane's sums in one long row (H rows W2 apart, as the input's), at least a
vector long, and unpad_rows copies them out: the caller's workspace gives the sums room, and
room for the reads of a short plane's vector past the plane (conv3x3: zeros in every padded
plane; conv3x3s2: room after the last phase plane), whose extra lanes are never used.
(conv3x3 on rows narrower than a vector that divide it keeps them unpadded: _narrow.py.)

A tile's two vectors are two consecutive vectors of one sample, or, where a sample has an odd
number of them, the same vector of two samples (tiling): an 8x8 plane's 80 row-padded sums
are five vectors, which pairs within the sample computed as six (conv3x3's tiles on ResNet-20's
8x8 layers, before _narrow.py, 1.10x faster paired, the same bits; conv3x3s2's 8x8 outputs
are 72 sums, five vectors, still).

conv3x3s2's backward data (phase_tiles) and conv1x1 (pointwise_tiles) take the tile with other
taps: a kernel for each phase or for each direction, compiled from one source with its taps
fixed (a closure's constants), since taps read at run time unroll no loop: a tuple of nine
taps read in tiles_forward's loop made conv3x3's tiles 1.5-1.8x slower.
"""

import numpy as np
from numba import prange

from ._jit import njit
from ._simd import VECTOR_BYTES, lanes, vfma, vload, vstore, vzero

# Non-negative indices as unsigned: Numba then drops its negative-index wraparound, which
# blocks vectorisation (conv.py says more).
_u = np.uint64

#: The register tile of the forward pass: TILE_VECTORS vectors of output pixels of each of
#: TILE_PLANES output planes, 16 vector registers of sums (of AVX-512's 32).
TILE_VECTORS = 2
TILE_PLANES = 8
#: A row pass's input bytes a sample from which its blocks of planes run innermost
#: (row_tile_at): half of a core's 1 MiB L2 cache on a Zen 5.
INNER_FROM = 1 << 19


def _vector_at(v, per_row, width, nl, src_row, dst_row):
    """(source offset, destination offset) of the v-th vector of sums: row v // per_row, its
    elements from column min(k * nl, width - nl), k = v % per_row (a row's last vector moves
    back to end at the row's end, overlapping its neighbour rather than running past it)."""
    i, k = v // per_row, v % per_row
    j = min(k * nl, width - nl)
    return i * src_row + j, i * dst_row + j


def _filters(w, a, c, p, q, flipped):
    """The TILE_PLANES filter taps of output planes a (a tuple) at input channel c, tap (p, q):
    w[a, c, p, q], or w[c, a, 2-p, 2-q] when flipped (backward data)."""
    if flipped:
        return (
            w[c, a[0], 2 - p, 2 - q], w[c, a[1], 2 - p, 2 - q], w[c, a[2], 2 - p, 2 - q],
            w[c, a[3], 2 - p, 2 - q], w[c, a[4], 2 - p, 2 - q], w[c, a[5], 2 - p, 2 - q],
            w[c, a[6], 2 - p, 2 - q], w[c, a[7], 2 - p, 2 - q],
        )  # fmt: skip
    return (
        w[a[0], c, p, q], w[a[1], c, p, q], w[a[2], c, p, q], w[a[3], c, p, q],
        w[a[4], c, p, q], w[a[5], c, p, q], w[a[6], c, p, q], w[a[7], c, p, q],
    )  # fmt: skip


def _fma_planes(acc, f, x):
    """acc[k] + f[k] * x for each of the TILE_PLANES planes k: one vector of pixels x, read once,
    feeds eight sums."""
    return (
        vfma(acc[0], f[0], x), vfma(acc[1], f[1], x), vfma(acc[2], f[2], x),
        vfma(acc[3], f[3], x), vfma(acc[4], f[4], x), vfma(acc[5], f[5], x),
        vfma(acc[6], f[6], x), vfma(acc[7], f[7], x),
    )  # fmt: skip


def _tile_at(t, tiles, blocks, vectors, per_row, width, nl, src_row, dst_row, paired, nb):
    """Task t's register tile (t over units of samples, then blocks of TILE_PLANES planes, then
    tiles): (samples n0 and n1 of its two vectors, first plane a0, source and destination
    offsets of the two (vector_at)). Two forms (tiling): a tile's two vectors are consecutive
    vectors of one sample (a unit is a sample, `tiles` = vectors / 2 rounded up); or, paired,
    the same vector of two consecutive samples (a unit is two samples, `tiles` = vectors).
    An odd last tile or pair computes its first vector again."""
    unit = t // (blocks * tiles)
    a0 = (t // tiles) % blocks * TILE_PLANES
    k = t % tiles
    if paired:
        n0, n1, v0, v1 = 2 * unit, min(2 * unit + 1, nb - 1), k, k
    else:
        n0, n1, v0, v1 = unit, unit, k * TILE_VECTORS, min(k * TILE_VECTORS + 1, vectors - 1)
    s0, d0 = vector_at(v0, per_row, width, nl, src_row, dst_row)
    s1, d1 = vector_at(v1, per_row, width, nl, src_row, dst_row)
    return n0, n1, a0, s0, d0, s1, d1


def _tiling(nb, vectors):
    """(paired, units, tiles) of a pass over nb samples of `vectors` vectors each (tile_at): a
    sample's vectors in pairs where their number is even (or the batch one sample), else the
    same vector of two samples, so that a short plane's odd vector is not computed twice
    (an 8x8 plane's 80 sums are 5 vectors of 16: 6 computed in pairs within the sample)."""
    if vectors % TILE_VECTORS == 0 or nb == 1:
        return False, nb, (vectors + TILE_VECTORS - 1) // TILE_VECTORS
    return True, (nb + 1) // 2, vectors


def _grid(dst, rows, width):
    """(per_row, vectors, paired, units, tiles, blocks) of a pass over dst's planes, each `rows`
    rows of `width` sums: the vectors a row and a plane, tiling's, and the blocks of
    TILE_PLANES planes. Its tasks are units x blocks x tiles (tile_at)."""
    nl = lanes_of(dst)
    per_row = (width + nl - 1) // nl
    vectors = rows * per_row
    paired, units, tiles = tiling(dst.shape[0], vectors)
    return per_row, vectors, paired, units, tiles, (dst.shape[1] + TILE_PLANES - 1) // TILE_PLANES


def _planes(a0, na):
    """The tile's TILE_PLANES output planes from a0, the last one repeated past na."""
    last = na - 1
    return (
        a0, min(a0 + 1, last), min(a0 + 2, last), min(a0 + 3, last),
        min(a0 + 4, last), min(a0 + 5, last), min(a0 + 6, last), min(a0 + 7, last),
    )  # fmt: skip


def _store_tile(dst, n0, n1, a0, d0, d1, acc0, acc1):
    """The tile's sums into dst[n0] at offset d0 and dst[n1] at d1, for its planes that exist."""
    for k in range(min(TILE_PLANES, dst.shape[1] - a0)):
        vstore(dst[n0, a0 + k], d0, acc0[k])
        vstore(dst[n1, a0 + k], d1, acc1[k])


def _zeros(a):
    z = vzero(a)
    return (z, z, z, z, z, z, z, z)


vector_at = njit(inline="always", cache=True)(_vector_at)
filters = njit(inline="always", cache=True)(_filters)
fma_planes = njit(inline="always", cache=True)(_fma_planes)
zeros = njit(inline="always", cache=True)(_zeros)
tile_at = njit(inline="always", cache=True)(_tile_at)
tiling = njit(inline="always", cache=True)(_tiling)
grid = njit(inline="always", cache=True)(_grid)
planes = njit(inline="always", cache=True)(_planes)
store_tile = njit(inline="always", cache=True)(_store_tile)


def _tiles_forward(dst, padded, w, flipped, rows, width, src_row, dst_row, shifts):
    """dst[n,a] at each vector's offset = sum_{b,p,q} f[a,b,p,q] padded[n,b,offset+shift_pq],
    shift_pq = shifts[3p + q], with f = w (flipped False: a filter, b a channel) or
    f[a,b,p,q] = w[b,a,2-p,2-q] (flipped True: conv3x3's backward data); each of `rows` rows
    of `width` sums is read from padded `src_row` apart and written into dst `dst_row` apart
    (vector_at). Two forms (forward_tiles): dst is the output itself (its rows, no copy), or
    each plane's sums in one row as long as the padded rows make it (then unpad_rows).

    The register tile: TILE_VECTORS vectors of consecutive sums of TILE_PLANES output planes,
    16 vectors that stay in registers while the loop runs over every input channel and tap:
    per tap two vector reads and eight filter taps feed 16 multiply-adds (the old loop read
    and wrote its sums in memory at each one). With an odd number of vectors the last tile's
    second vector is its first again, and planes past the last one repeat it: computed, not
    written. Every sum is one chain of fused multiply-adds over (b, p, q) in that order, from
    zero, in whichever tile or form it falls: the same bits on any thread count, chunking or
    CPU. Parallel over tiles; writes dst only."""
    nb, na = dst.shape[0], dst.shape[1]
    ni = padded.shape[1]
    nl = lanes_of(dst)
    per_row, vectors, paired, units, tiles, blocks = grid(dst, rows, width)
    for t in prange(units * blocks * tiles):
        n0, n1, a0, s0, d0, s1, d1 = tile_at(
            t, tiles, blocks, vectors, per_row, width, nl, src_row, dst_row, paired, nb
        )
        a = planes(a0, na)
        acc0 = zeros(dst)
        acc1 = zeros(dst)
        for b in range(ni):
            src0, src1 = padded[n0, b], padded[n1, b]
            for p in range(3):
                for q in range(3):
                    f = filters(w, a, b, p, q, flipped)
                    shift = shifts[p * 3 + q]
                    acc0 = fma_planes(acc0, f, vload(src0, s0 + shift))
                    acc1 = fma_planes(acc1, f, vload(src1, s1 + shift))
        store_tile(dst, n0, n1, a0, d0, d1, acc0, acc1)


def _row_tiling(dst, src, width):
    """(vectors, paired, units, tiles, blocks, inner) of a pass whose output planes are each
    one row of `width` sums (phase_tiles, pointwise_tiles): tiling's, the blocks of planes, and
    whether the blocks run innermost (row_tile_at): where a sample's input is larger than
    INNER_FROM bytes."""
    _, vectors, paired, units, tiles, blocks = grid(dst, 1, width)
    inner = src.shape[1] * src.shape[2] * src.itemsize > INNER_FROM
    return vectors, paired, units, tiles, blocks, inner


def _row_tile_at(t, dst, width, vectors, paired, tiles, blocks, inner):
    """tile_at of such a pass: a row of `vectors` vectors a plane; with `inner`, the tasks in
    another order, the blocks of planes innermost, so that consecutive tasks read the same
    vectors of the input while they are in the cache. The im2col matrix of the CNN's 5x5
    layer (500 x 1024 floats, 2 MiB; a strip of 2 vectors 64 KiB) is read once a block with
    the blocks outermost: 1.43x slower (2-core AMD EPYC). On 1x1 layers of 16-64 KiB inputs
    the blocks outermost were 4-11% faster."""
    # signed: prange's index may be unsigned, and Numba unifies unsigned with signed to a float
    task = np.int64(t)
    if inner:
        unit, rest = task // (blocks * tiles), task % (blocks * tiles)
        task = unit * blocks * tiles + rest % blocks * tiles + rest // blocks
    nl = lanes_of(dst)
    return tile_at(task, tiles, blocks, vectors, vectors, width, nl, 0, 0, paired, dst.shape[0])


row_tiling = njit(inline="always", cache=True)(_row_tiling)
row_tile_at = njit(inline="always", cache=True)(_row_tile_at)


def _phase(a, b):
    """The kernel of phase (a, b) of conv3x3s2's backward data (conv3x3s2.py's docstring) on
    the tiles, its taps' loops fixed when it compiles (a and b are constants there: read at run
    time, the four phases ran at 100-155 GFLOP/s where the forward's tiles make 300):

        dst[n,c] at each vector's offset u = sum_{o,p,q} w[o,c,2-p,2-q] dyp[n,o,u+shift_pq]

    over the taps p in (a, a+2), q in (b, b+2) within the filter (4, 2, 2 or 1 of them),
    shift_pq = ((p+1)//2)*W2 + (q+1)//2, the sums in one row of `width` from `start` (rows W2
    apart, as dyp's). The tile, the order ((o, p, q), one chain of fused multiply-adds from
    zero) and the tiling are tiles_forward's. Parallel over tiles; writes dst only."""

    def phase_tiles(dst, dyp, w, start, width, w2):
        vectors, paired, units, tiles, blocks, inner = row_tiling(dst, dyp, width)
        for t in prange(units * blocks * tiles):
            n0, n1, a0, s0, d0, s1, d1 = row_tile_at(
                t, dst, width, vectors, paired, tiles, blocks, inner
            )
            s0, d0, s1, d1 = s0 + start, d0 + start, s1 + start, d1 + start
            out = planes(a0, dst.shape[1])
            acc0 = zeros(dst)
            acc1 = zeros(dst)
            for o in range(dyp.shape[1]):
                src0, src1 = dyp[n0, o], dyp[n1, o]
                for p in range(a, 3, 2):
                    for q in range(b, 3, 2):
                        f = filters(w, out, o, p, q, True)
                        shift = (p + 1) // 2 * w2 + (q + 1) // 2
                        acc0 = fma_planes(acc0, f, vload(src0, s0 + shift))
                        acc1 = fma_planes(acc1, f, vload(src1, s1 + shift))
            store_tile(dst, n0, n1, a0, d0, d1, acc0, acc1)

    phase_tiles.__qualname__ += f"_{a}{b}"  # a disk cache of its own (_jit.py)
    return njit(parallel=True, cache=True)(phase_tiles)


def _pointwise(flipped):
    """The tiles of a 1x1 convolution's forward (flipped False) or backward data (True) over
    planes of `width` pixels (conv1x1.py): dst[n,a,u] = sum_b f[a,b] src[n,b,u], f[a,b] =
    w[a,b,0,0], or w[b,a,0,0] when flipped; one tap, shift 0. The tile, the order (b, one
    chain of fused multiply-adds from zero) and the tiling are tiles_forward's; `flipped` is
    fixed when it compiles, as phase_tiles' taps are. Parallel over tiles; writes dst only."""
    tap = 2 if flipped else 0  # filters() reads w[b, a, 2 - tap, 2 - tap] when flipped

    def pointwise_tiles(dst, src, w, width):
        vectors, paired, units, tiles, blocks, inner = row_tiling(dst, src, width)
        for t in prange(units * blocks * tiles):
            n0, n1, a0, s0, d0, s1, d1 = row_tile_at(
                t, dst, width, vectors, paired, tiles, blocks, inner
            )
            out = planes(a0, dst.shape[1])
            acc0 = zeros(dst)
            acc1 = zeros(dst)
            for b in range(src.shape[1]):
                f = filters(w, out, b, tap, tap, flipped)
                acc0 = fma_planes(acc0, f, vload(src[n0, b], s0))
                acc1 = fma_planes(acc1, f, vload(src[n1, b], s1))
            store_tile(dst, n0, n1, a0, d0, d1, acc0, acc1)

    pointwise_tiles.__qualname__ += "_flipped" if flipped else ""  # a disk cache of its own
    return njit(parallel=True, cache=True)(pointwise_tiles)


def _lanes_of(a):
    return VECTOR_BYTES // a.itemsize


def _unpad_rows(y, sums, w2):
    """y[n,a,i,j] = sums[n,a,i*W2+j]: each plane's sums without the two extra columns of its
    rows. A copy, memory-bound; parallel over the planes."""
    nb, na, h, wd = y.shape
    for t in prange(nb * na):
        n, a = t // na, t % na
        for i in range(h):
            for j in range(wd):
                y[n, a, i, j] = sums[n, a, _u(i * w2 + j)]


def _valid_tiles(dst, x, w, rows, width, src_row):
    """tiles_forward's tiles for a valid convolution with stride 1 and any KH x KW filters:
    dst[n,a] (rows of `width` sums, `width` apart) = sum_{b,p,q} w[a,b,p,q] x[n,b,offset +
    p*W + q], x's planes (H*W) its own layout (W = src_row). The same tile, order and bits;
    the taps' loops run to the filter's size read at run time, which tiles_forward keeps
    literal (3x3: a ResNet-20 step was 12-14% slower with its loops read at run time).
    Parallel over tiles; writes dst only."""
    nb, na = dst.shape[0], dst.shape[1]
    ni, kh, kw = x.shape[1], w.shape[2], w.shape[3]
    nl = lanes_of(dst)
    per_row, vectors, paired, units, tiles, blocks = grid(dst, rows, width)
    for t in prange(units * blocks * tiles):
        n0, n1, a0, s0, d0, s1, d1 = tile_at(
            t, tiles, blocks, vectors, per_row, width, nl, src_row, width, paired, nb
        )
        a = planes(a0, na)
        acc0 = zeros(dst)
        acc1 = zeros(dst)
        for b in range(ni):
            src0, src1 = x[n0, b], x[n1, b]
            for p in range(kh):
                for q in range(kw):
                    f = filters(w, a, b, p, q, False)
                    acc0 = fma_planes(acc0, f, vload(src0, s0 + p * src_row + q))
                    acc1 = fma_planes(acc1, f, vload(src1, s1 + p * src_row + q))
        store_tile(dst, n0, n1, a0, d0, d1, acc0, acc1)


lanes_of = njit(inline="always", cache=True)(_lanes_of)
tiles_forward = njit(parallel=True, cache=True)(_tiles_forward)
valid_tiles = njit(parallel=True, cache=True)(_valid_tiles)
#: pointwise_tiles, forward (False) and backward data (True)
POINTWISE_TILES = {False: _pointwise(False), True: _pointwise(True)}


def pointwise(out, src, w, width, flipped):
    """out (N, A, width) = pointwise_tiles' sums over src (N, B, width), flipped or not, where
    they apply: True when done, False where the caller's GEMM must run instead. They apply to
    float32 and float64 rows of a vector or more (the last vector moves back within the
    row)."""
    if out.dtype not in (np.float32, np.float64) or width < lanes(out.dtype):
        return False
    POINTWISE_TILES[flipped](out, src, w, width)
    return True


#: phase_tiles of phase k = 2a + b
PHASE_TILES = tuple(_phase(k // 2, k % 2) for k in range(4))
unpad_rows = njit(parallel=True, cache=True)(_unpad_rows)


def forward_tiles(out, padded, sums, w, flipped, src_row, shifts):
    """out (N, A, H, W) = the tiles' sums over padded (N, B, input layout), straight into out
    where a row holds a vector and out is C-contiguous, else through sums (N, A, at least
    max(H * src_row, lanes)) and unpad_rows. Writes out (and sums)."""
    nb, na, h, wd = out.shape
    if wd >= lanes(out.dtype) and out.flags.c_contiguous:
        flat = out.reshape(nb, na, h * wd)
        tiles_forward(flat, padded, w, flipped, h, wd, src_row, wd, shifts)
    else:
        tiles_forward(sums, padded, w, flipped, 1, sums.shape[2], 0, 0, shifts)
        unpad_rows(out, sums, src_row)
