"""Matrix multiplication: OpenBLAS's GEMM on pieces of the product, run by Numba's threads.

The product out (M,N) = op(a) @ op(b) is cut into chunks of columns (or of rows, when M > N),
and a Numba ``prange`` loop hands the chunks to its threads; each calls NumPy's OpenBLAS
(blas.py), single-threaded, on its chunk. So the GEMMs use the same threads as every other
kernel, as many as ``numba.set_num_threads`` gives the calling thread, and no second pool of
threads fights Numba's for the cores (blas.py says what that costs).

Memory contract: ``matmul`` writes into ``out`` and allocates nothing, provided ``out`` does not
overlap ``a`` or ``b``. ``gemm``, the same product with a flag that adds it into ``out`` (BLAS's
beta = 1: the convolution's backward filter sums groups of samples so), allocates nothing either
where OpenBLAS runs it. ``a`` and ``b`` may be transposed or sliced views (BLAS reads them through
its transpose flags and leading dimensions); one with no unit stride (and an integer dtype)
goes to ``np.matmul``, which copies it.

Determinism: the chunk width depends on the shape only, never on the thread count, and each
chunk is one single-threaded GEMM, which sums every element in a fixed order. So a product is
bit-identical whatever the number of threads running it, and on every call.

Small products (SMALL_PRODUCT) go straight to ``np.matmul``, which OpenBLAS runs on one thread.
Without a usable OpenBLAS (blas.MISSING says why), ``np.matmul`` does every product, on the BLAS
NumPy was built with, with that BLAS's own threads.
"""

import numpy as np
from numba import prange

from . import blas
from ._jit import njit

MAX_CHUNKS = 16  # chunks of a product: enough to share among 16 threads
# Products of at most this many multiply-adds (M*N*K) go to np.matmul: OpenBLAS runs them on
# one thread anyway (its own threshold, 64^3), and calling it straight costs ~1 us where the
# chunked path costs ~16 us of dispatch: most of an RNN's or a small MLP's products.
SMALL_PRODUCT = 64**3
MIN_CHUNK = 64  # rows or columns per chunk, at least (a multiple of every SIMD kernel's width)


def gemm_chunk(extent):
    """Rows or columns per chunk for a product `extent` wide in the dimension it is cut along:
    at least MIN_CHUNK, at most MAX_CHUNKS chunks, a multiple of MIN_CHUNK. Plain Python."""
    per = -(-extent // MAX_CHUNKS)
    return max(MIN_CHUNK, -(-per // MIN_CHUNK) * MIN_CHUNK)


def _gemm_in_chunks(blas_gemm, by_rows, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, chunk, size, beta):
    """c = op(a) @ op(b) + beta * c (beta 0 or 1; row-major, addresses and leading dimensions in
    elements of `size` bytes), one single-threaded GEMM per chunk of `chunk` rows (by_rows) or
    columns of c."""
    extent = m if by_rows else n
    for p in prange((extent + chunk - 1) // chunk):
        lo = p * chunk
        width = min(extent, lo + chunk) - lo
        if by_rows:  # rows lo.. of op(a) and of c
            rows, cols = width, n
            a_at = a + lo * (1 if ta == blas.TRANS else lda) * size
            b_at, c_at = b, c + lo * ldc * size
        else:  # columns lo.. of op(b) and of c
            rows, cols = m, width
            b_at = b + lo * (ldb if tb == blas.TRANS else 1) * size
            a_at, c_at = a, c + lo * size
        blas_gemm(blas.ROW_MAJOR, ta, tb, rows, cols, k, 1.0, a_at, lda, b_at, ldb, beta, c_at, ldc)


# One compiled function per dtype: Numba would run the float32 one for dgemm as well (it takes
# one foreign function's type for the other), passing float arguments where dgemm reads doubles.
sgemm_in_chunks = njit(parallel=True, cache=True)(_gemm_in_chunks)
dgemm_in_chunks = njit(parallel=True, cache=True)(_gemm_in_chunks)
GEMM_IN_CHUNKS = {
    np.dtype(np.float32): ("sgemm", sgemm_in_chunks),
    np.dtype(np.float64): ("dgemm", dgemm_in_chunks),
}


def _blas_operand(x, trans):
    """(flag, leading dimension) under which BLAS reads op(x) from x's bytes, or None when x
    has no unit stride. A column-major x is the transpose of a row-major one: flip the flag."""
    rows, cols = x.shape
    s0, s1 = (s // x.itemsize for s in x.strides)
    if (s1 == 1 or cols == 1) and s0 >= max(1, cols):
        return (blas.TRANS if trans else blas.NO_TRANS), max(1, s0 if rows > 1 else cols)
    if (s0 == 1 or rows == 1) and s1 >= max(1, rows):
        return (blas.NO_TRANS if trans else blas.TRANS), max(1, s1 if cols > 1 else rows)
    return None


def matmul(out, a, b, trans_a=False, trans_b=False):
    """out (M,N) = op(a) @ op(b), op(a) (M,K), op(b) (K,N), where op transposes when its flag is
    set (a and b are passed as stored: the linear layer's backward multiplies by W^T this way,
    and the CUDA twin reads the transpose through its indexing instead of a strided view).
    Writes out (C-contiguous, same dtype); no workspace."""
    gemm(out, a, b, trans_a, trans_b, False)


def gemm(out, a, b, trans_a, trans_b, accumulate):
    """out (+)= op(a) @ op(b): matmul, or with `accumulate` the product added into out (BLAS's
    beta = 1: each element's sum goes on from the value out holds). Without a usable OpenBLAS an
    accumulated product is made apart and added (NumPy allocates it)."""
    if out.dtype != a.dtype or out.dtype != b.dtype:
        raise TypeError(f"matmul: dtypes must match, got out={out.dtype}, a={a.dtype}, b={b.dtype}")
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    if out.shape != (m, n) or (b.shape[1] if trans_b else b.shape[0]) != k:
        raise ValueError(f"matmul: shapes {a.shape}, {b.shape} -> {out.shape} do not agree")
    if not out.flags.c_contiguous:
        raise ValueError("matmul: out must be C-contiguous")
    # np.matmul cannot add into out: an accumulated product goes to OpenBLAS whatever its size
    small = m * n * k <= SMALL_PRODUCT and not accumulate
    op_a = op_b = None
    if not small and blas.FOUND is not None and out.dtype in GEMM_IN_CHUNKS:
        op_a, op_b = _blas_operand(a, trans_a), _blas_operand(b, trans_b)
    if op_a is None or op_b is None:
        left, right = (a.T if trans_a else a), (b.T if trans_b else b)
        if accumulate:
            out += np.matmul(left, right)
        else:
            np.matmul(left, right, out=out)  # empty ones too
        return
    by_rows = m > n
    name, gemm_in_chunks = GEMM_IN_CHUNKS[out.dtype]
    with blas.single_threaded():
        gemm_in_chunks(
            getattr(blas.FOUND, name),
            by_rows,
            op_a[0],
            op_b[0],
            m,
            n,
            k,
            a.ctypes.data,
            op_a[1],
            b.ctypes.data,
            op_b[1],
            out.ctypes.data,
            n,
            gemm_chunk(m if by_rows else n),
            out.itemsize,
            1.0 if accumulate else 0.0,
        )
