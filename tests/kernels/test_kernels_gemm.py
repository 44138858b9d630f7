"""The GEMM kernel (kernels/cpu/gemm.py): OpenBLAS on chunks of the product, run by Numba's
threads; its results, its determinism, and that it leaves OpenBLAS's own setting as it was."""

import threading

import numba
import numpy as np
import pytest
from kernel_testutil import assert_close64

from nnmem.kernels.cpu import blas, gemm
from nnmem.kernels.cpu.gemm import gemm_chunk, matmul

needs_blas = pytest.mark.skipif(blas.FOUND is None, reason=f"no OpenBLAS: {blas.MISSING}")


def test_numpy_openblas_is_found_here():
    """NumPy's wheels bundle OpenBLAS; where it is missing, the reason is recorded."""
    assert (blas.FOUND is None) == (blas.MISSING is not None)
    if blas.FOUND is not None:
        assert "openblas" in blas.FOUND.path.lower()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize(
    "m,k,n",
    [(3, 5, 7), (1, 1, 1), (200, 3, 1000), (1000, 17, 30), (130, 70, 1), (1, 64, 300)],
)
def test_every_layout_gives_the_product(rng, dtype, trans_a, trans_b, m, k, n):
    """Chunks of rows (m > n) and of columns, both transpose flags, both dtypes: the product."""
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    out = np.full((m, n), np.nan, dtype)
    matmul(out, a, b, trans_a, trans_b)
    expected = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("m,k,n", [(3, 5, 7), (200, 3, 1000), (1000, 17, 30), (4, 0, 5)])
def test_gemm_adds_the_product_into_out(rng, dtype, trans_b, m, k, n):
    """accumulate (BLAS's beta = 1: the convolution's backward filter adds its sample groups
    so): out + op(a) @ op(b), small products too (np.matmul cannot add into out), and the empty
    sum leaves out as it was."""
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    start = rng.standard_normal((m, n)).astype(dtype)
    out = start.copy()
    gemm.gemm(out, a, b, False, trans_b, True)
    expected = start + a.astype(np.float64) @ (b.T if trans_b else b)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * max(k, 1))


def test_views_are_read_in_place(rng):
    """A slice of rows and columns, a Fortran-ordered matrix and a transposed view are read
    through leading dimensions and flags, as the convolution's GEMMs pass them."""
    big = rng.standard_normal((40, 50))
    a = big[3:23, 5:35]  # (20, 30), leading dimension 50
    b = np.asfortranarray(rng.standard_normal((30, 70)))
    out = np.empty((20, 70))
    matmul(out, a, b)
    assert_close64(out, a @ b)
    matmul(out, a, b.T.T)
    assert_close64(out, a @ b)
    c = rng.standard_normal((70, 30))
    matmul(out, a, c.T)
    assert_close64(out, a @ c.T)


def test_no_unit_stride_goes_to_numpy(rng):
    """A view with no unit stride (every other column) still gives the product (NumPy copies
    it); an integer dtype too."""
    a = rng.standard_normal((6, 20))[:, ::2]
    b = rng.standard_normal((10, 4))
    out = np.empty((6, 4))
    matmul(out, a, b)
    assert_close64(out, a @ b)
    ints = np.arange(6).reshape(2, 3)
    out_i = np.empty((2, 2), ints.dtype)
    matmul(out_i, ints, ints.T)
    np.testing.assert_array_equal(out_i, ints @ ints.T)


def test_empty_products(rng):
    """k = 0 is a matrix of zeros (the empty sum); m or n = 0 writes nothing."""
    out = np.full((3, 4), np.nan)
    matmul(out, np.empty((3, 0)), np.empty((0, 4)))
    np.testing.assert_array_equal(out, 0.0)
    matmul(np.empty((0, 4)), np.empty((0, 5)), np.empty((5, 4)))


def test_bad_arguments_are_refused(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((5, 6))
    with pytest.raises(ValueError, match="do not agree"):
        matmul(np.empty((3, 6)), a, b)
    with pytest.raises(ValueError, match="C-contiguous"):
        matmul(np.empty((6, 3)).T, a, rng.standard_normal((4, 6)))
    with pytest.raises(TypeError, match="dtypes must match"):
        matmul(np.empty((3, 6), np.float32), a, rng.standard_normal((4, 6)))


def test_chunk_width_depends_on_the_shape_alone():
    assert gemm_chunk(10) == gemm.MIN_CHUNK
    assert gemm_chunk(9216) == 576  # 16 chunks of a multiple of 64
    for extent in (1, 63, 64, 65, 1000, 10**6):
        chunk = gemm_chunk(extent)
        assert chunk % gemm.MIN_CHUNK == 0
        assert -(-extent // chunk) <= gemm.MAX_CHUNKS


@needs_blas
@pytest.mark.parametrize("shape", [(32, 800, 9216), (800, 32, 4096), (16, 36864, 144)])
def test_the_same_bits_with_any_number_of_threads(rng, shape):
    """Every thread count gives bit-identical products: the chunks are fixed by the shape,
    each a single-threaded GEMM (the promise concurrency control relies on)."""
    m, k, n = shape
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    results = []
    before = numba.get_num_threads()
    try:
        for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
            numba.set_num_threads(threads)
            out = np.empty((m, n), np.float32)
            matmul(out, a, b)
            results.append(out)
    finally:
        numba.set_num_threads(before)
    for out in results[1:]:
        np.testing.assert_array_equal(out, results[0])
    np.testing.assert_allclose(results[0], a.astype(np.float64) @ b, rtol=1e-3, atol=1e-2)


@needs_blas
def test_openblas_thread_count_is_put_back(rng):
    """nnmem's GEMMs run OpenBLAS single-threaded and put the program's count back after,
    also when two threads run GEMMs at once and when a GEMM fails."""
    before = blas.FOUND.get_threads()
    a = rng.standard_normal((300, 200))
    inside = []

    def work():
        for _ in range(20):
            out = np.empty((300, 300))
            matmul(out, a, a.T)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with blas.single_threaded():
        inside.append(blas.FOUND.get_threads())
    assert inside == [1]
    assert blas.FOUND.get_threads() == before
    with pytest.raises(RuntimeError), blas.single_threaded():
        raise RuntimeError("a failing GEMM")
    assert blas.FOUND.get_threads() == before
