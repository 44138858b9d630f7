"""Matrix multiplication: a tiled shared-memory GEMM, out = op(a) @ op(b).

op(a) is a or a^T (``trans_a``), op(b) is b or b^T (``trans_b``); a and b are passed as stored
(C-contiguous). A 2-D transposed view (F-contiguous, e.g. ``w.T``) is accepted too: it is the
C-contiguous array under it with the flag flipped, so nothing is copied.

The algorithm (the classic one of the CUDA programming guide). out is cut into TILE x TILE
tiles and one block of TILE x TILE threads computes one tile, thread (ty, tx) owning
out[row0 + ty, col0 + tx]. The block walks the K dimension in steps of TILE: each step, every
thread loads ONE element of op(a)'s tile and ONE of op(b)'s into shared memory, the block
synchronises, and every thread reads TILE pairs from shared memory for its dot product. So
device memory is read TILE times less than by a naive kernel (one thread per output, reading
a whole row of op(a) and column of op(b)).

Coalescing: the 16 threads of a half-warp (consecutive tx) must read 16 consecutive addresses.
For op(a) = a they read a row segment of a; for op(a) = a^T the roles of tx and ty are swapped
during the load (they read a row segment of a, which is a column segment of op(a)) and write
the shared tile transposed. Bank conflicts: the shared tiles have TILE + 1 columns, so the 16
threads of a row writing a column of the tile (a stride of 17 words, coprime with the 32 banks)
hit 16 different banks, where a stride of 16 would put them all in two.

A second kernel for a small output with a long K (the convolution's backward-filter pass: dW
has o x c*kh*kw elements, its sums run over batch x pixels, tens of thousands of terms). Tiles
would give such a GEMM a few dozen blocks on a GPU that runs thousands, each walking all of K
alone. Instead one block owns one output element: its threads sum strided shares of K (reading
consecutive addresses of a row of a and of b^T: coalesced) into float64, and the block adds the
shares in a tree (reduce.block_sum): fixed order, so still bit-identical on every call.

Memory: writes out and allocates nothing; out must not overlap a or b (a thread may write its
element of out while another block still reads that address as part of a or b). The sum is
accumulated in out's dtype (float32 for a float16 out, whose tiles stay float16 in shared memory and
are widened as they are multiplied), each element in a fixed order: bit-identical on every call (it
differs from the CPU's BLAS in the last bits). With ``accumulate`` (used by the convolution's
backward-filter pass) the product is added into out instead.
"""

from numba import cuda, float64

from ._launch import (
    A2,
    REDUCE_THREADS,
    TILE,
    acc_zero,
    check_device,
    each_float,
    float_dtype,
    kernel,
    widen,
)
from .elementwise import fill
from .reduce import block_sum

#: A product with fewer output tiles than FEW_TILES and at least LONG_K terms per sum gets one
#: block per output element (_gemm_long_k_kernel) instead of one per tile.
FEW_TILES = 256
LONG_K = 4096

# Shared tiles are TILE x (TILE + 1): the extra column is the padding against bank conflicts
# (a module constant, because a shared array's shape must be known when the kernel compiles).
_PADDED = TILE + 1


@kernel(*each_float(f"void({A2}, {A2}, {A2}, boolean, boolean, boolean)"))
def _gemm_kernel(out, a, b, trans_a, trans_b, accumulate):
    """out[r, c] (+)= sum_k op(a)[r, k] * op(b)[k, c]. Block (TILE, TILE) = one out tile;
    grid (ceil(N / TILE), ceil(M / TILE)) (x runs along the long, column dimension)."""
    ta = cuda.shared.array((TILE, _PADDED), dtype=out.dtype)  # ta[r, k] = op(a)[row0+r, k0+k]
    tb = cuda.shared.array((TILE, _PADDED), dtype=out.dtype)  # tb[k, c] = op(b)[k0+k, col0+c]
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row0 = cuda.blockIdx.y * TILE
    col0 = cuda.blockIdx.x * TILE
    m, n = out.shape
    k = b.shape[1] if trans_b else b.shape[0]
    zero = out.dtype.type(0)  # the tiles' padding
    acc = acc_zero(out)
    for k0 in range(0, k, TILE):
        # Padding: outside op(a) / op(b) the tiles hold zeros, which add nothing to the sums.
        if trans_a:  # op(a)[r, kk] = a[kk, r]: consecutive tx read consecutive r of row kk
            r = row0 + tx
            kk = k0 + ty
            ta[tx, ty] = a[kk, r] if r < m and kk < k else zero
        else:  # consecutive tx read consecutive kk of row r
            r = row0 + ty
            kk = k0 + tx
            ta[ty, tx] = a[r, kk] if r < m and kk < k else zero
        if trans_b:  # op(b)[kk, c] = b[c, kk]: consecutive tx read consecutive kk of row c
            c = col0 + ty
            kk = k0 + tx
            tb[tx, ty] = b[c, kk] if c < n and kk < k else zero
        else:  # consecutive tx read consecutive c of row kk
            c = col0 + tx
            kk = k0 + ty
            tb[ty, tx] = b[kk, c] if c < n and kk < k else zero
        cuda.syncthreads()  # the tiles are complete
        for j in range(TILE):
            acc += widen(ta[ty, j]) * widen(tb[j, tx])
        cuda.syncthreads()  # everyone is done with the tiles before the next step overwrites them
    r = row0 + ty
    c = col0 + tx
    if r < m and c < n:
        if accumulate:
            out[r, c] = widen(out[r, c]) + acc
        else:
            out[r, c] = acc


@kernel(*each_float(f"void({A2}, {A2}, {A2}, boolean, boolean, boolean)"))
def _gemm_long_k_kernel(out, a, b, trans_a, trans_b, accumulate):
    """out[r, c] (+)= sum_k op(a)[r, k] * op(b)[k, c]. Grid (N, M): block (c, r) owns out[r, c];
    its REDUCE_THREADS threads sum k = t, t + T, t + 2T, ... in float64, then block_sum."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    r = cuda.blockIdx.y
    c = cuda.blockIdx.x
    k = b.shape[1] if trans_b else b.shape[0]
    share = 0.0
    for kk in range(cuda.threadIdx.x, k, cuda.blockDim.x):
        x = a[kk, r] if trans_a else a[r, kk]
        y = b[c, kk] if trans_b else b[kk, c]
        share += float64(x) * float64(y)
    total = block_sum(buf, share)
    if cuda.threadIdx.x == 0:
        if accumulate:
            out[r, c] += total
        else:
            out[r, c] = total


def _as_stored(a, trans):
    """(C-contiguous array, flag) for a 2-D operand: an F-contiguous view is its transpose's."""
    if not cuda.devicearray.is_cuda_ndarray(a) or a.ndim != 2:
        return a, trans  # check_device will say what is wrong
    if not a.is_c_contiguous() and a.is_f_contiguous():
        return a.T, not trans
    return a, trans


def gemm(out, a, b, trans_a, trans_b, accumulate, stream):
    """Launch the tiled GEMM: out (+)= op(a) @ op(b). Checks shapes; used by matmul and conv."""
    m, n = out.shape
    am, ak = (a.shape[1], a.shape[0]) if trans_a else a.shape
    bk, bn = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if am != m or bn != n or ak != bk:
        raise ValueError(
            f"matmul: op(a) {am}x{ak} @ op(b) {bk}x{bn} does not give out {m}x{n} "
            f"(trans_a={trans_a}, trans_b={trans_b})"
        )
    if m == 0 or n == 0:
        return
    if ak == 0:  # an empty sum: nothing to launch the GEMM for (its operands have no elements)
        if not accumulate:
            fill(out.reshape(-1), 0.0, stream=stream)
        return
    grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
    if grid[0] * grid[1] < FEW_TILES and ak >= LONG_K and m <= 65535:
        _gemm_long_k_kernel[(n, m), REDUCE_THREADS, stream](out, a, b, trans_a, trans_b, accumulate)
        return
    if grid[1] > 65535:  # CUDA's limit on gridDim.y
        raise ValueError(f"matmul: {m} rows exceed the {65535 * TILE} this grid can cover")
    _gemm_kernel[grid, (TILE, TILE), stream](out, a, b, trans_a, trans_b, accumulate)


def matmul(out, a, b, trans_a=False, trans_b=False, *, stream=0):
    """out (M,N) = op(a) (M,K) @ op(b) (K,N), op transposing where the flag is set.
    Writes out (C-contiguous, same dtype; must not overlap a or b); no workspace."""
    a, trans_a = _as_stored(a, bool(trans_a))
    b, trans_b = _as_stored(b, bool(trans_b))
    check_device("matmul", ndim=2, out=out, a=a, b=b)
    float_dtype("matmul", out=out, a=a, b=b)
    gemm(out, a, b, trans_a, trans_b, False, stream)
