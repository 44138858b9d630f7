"""The vector type of the register-tiled CPU kernels (kernels/cpu/_simd.py): each operation
compiled against NumPy, and conv3x3's register tiles run as plain Python
(NUMBA_DISABLE_JIT=1, the debugging mode every kernel keeps) against their compiled selves."""

import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
from llvmlite import binding

from nnmem.kernels.cpu import _simd
from nnmem.kernels.cpu._jit import njit
from nnmem.kernels.cpu._simd import (
    lanes,
    vadd,
    vfma,
    vkeep,
    vload,
    vmul,
    vsplat,
    vstore,
    vsum,
    vtranspose,
    vwload,
    vzero,
)

needs_jit = pytest.mark.skipif(numba.config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT: no compiling")


def _fma_then_store(out, acc_from, s, x_from, a, x):
    """out[:lanes] = a[acc_from:] + s * x[x_from:], one vector each, compiled."""
    vstore(out, 0, vfma(vload(a, acc_from), s, vload(x, x_from)))


def _zeros_stored(out, i):
    vstore(out, i, vzero(out))


def _wide_sums(out, a, i, s):
    """The float64 operations of BatchNorm's sums on the vector of a from element i: out[0] =
    vsum(widened), out[1] = vsum(widened * s + s), out[2] = vsum of the fma of the vector with
    itself onto vsplat(s)."""
    v = vwload(a, i)
    out[0] = vsum(v)
    out[1] = vsum(vadd(vmul(v, s), s))
    out[2] = vsum(vfma(vsplat(s), v, v))


def _kept_and_transposed(out, a, bits, dst, d, dst_step, src, s, src_step):
    """out[:lanes] = vkeep of a's first vector by `bits`; dst's block = vtranspose of src's."""
    vstore(out, 0, vkeep(vload(a, 0), bits))
    vtranspose(dst, d, dst_step, src, s, src_step)


kept_and_transposed = njit()(_kept_and_transposed)
fma_then_store = njit()(_fma_then_store)
zeros_stored = njit()(_zeros_stored)
wide_sums = njit()(_wide_sums)


def test_a_vector_is_one_register_of_the_cpu():
    assert _simd.VECTOR_BYTES in (32, 64)
    assert lanes(np.float32) == _simd.VECTOR_BYTES // 4
    assert lanes(np.float64) == _simd.VECTOR_BYTES // 8


@needs_jit
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_load_fma_store_zero_against_numpy(rng, dtype):
    """vload and vstore move `lanes` consecutive elements from any offset (unaligned); vfma
    rounds once: against the float64 (float32) or exactly rounded (float64, by a product
    chosen exact) sum."""
    n = lanes(dtype)
    a = rng.standard_normal(3 * n).astype(dtype)
    x = rng.standard_normal(3 * n).astype(dtype)
    s = dtype(rng.standard_normal())
    out = np.full(2 * n, np.nan, dtype)
    fma_then_store(out, 3, s, n + 5, a, x)
    want = (np.float64(s) * x[n + 5 : 2 * n + 5].astype(np.float64) + a[3 : n + 3]).astype(dtype)
    if dtype == np.float32:  # float32's product is exact in float64: one rounding, as fma
        np.testing.assert_array_equal(out[:n], want)
    else:
        np.testing.assert_allclose(out[:n], want, rtol=1e-15)
    assert np.isnan(out[n:]).all()  # one vector written, no more
    halves = np.array([0.5] * n, dtype)  # 0.5 * 3 + 0.25: exact in any dtype
    fma_then_store(out, 0, dtype(3), 0, np.full(n, 0.25, dtype), halves)
    np.testing.assert_array_equal(out[:n], np.full(n, 1.75, dtype))
    zeros_stored(out, n)
    np.testing.assert_array_equal(out[n:], np.zeros(n, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_masked_lanes_and_transposed_blocks(rng, dtype):
    """vkeep zeroes the lanes whose bit is clear, +0 whatever they held (an infinity, a NaN),
    and keeps the others' bits; vtranspose writes the block's columns as rows, between rows
    `step` apart, and nothing else: compiled, and as Python (NUMBA_DISABLE_JIT=1)."""
    n = lanes(dtype)
    a = rng.standard_normal(n).astype(dtype)
    a[0], a[1], a[-1] = np.inf, np.nan, -0.0
    bits = int(rng.integers(0, 2**n)) | 1 | 1 << (n - 1)  # lane 0 and the last kept
    bits &= ~2  # lane 1 (the NaN) zeroed
    src = rng.standard_normal(n * (n + 3) + 7).astype(dtype)
    dst = np.full(n * (n + 5) + 11, np.nan, dtype)
    out = np.full(n + 1, 7.0, dtype)
    kept_and_transposed(out, a, bits, dst, 11, n + 5, src, 7, n + 3)
    kept = (bits >> np.arange(n)) & 1 == 1
    np.testing.assert_array_equal(out[:n][kept], a[kept])
    assert (out[:n][~kept] == 0).all() and not np.signbit(out[:n][~kept]).any()
    assert out[n] == 7.0  # one vector written
    for small in (np.uint8, np.uint16):  # masks of integer types narrower or as wide as lanes
        narrow = small(bits & np.iinfo(small).max)
        kept_and_transposed(out, a, narrow, dst, 11, n + 5, src, 7, n + 3)
        kept = (int(narrow) >> np.arange(n)) & 1 == 1
        np.testing.assert_array_equal(out[:n][kept], a[kept])
        assert (out[:n][~kept] == 0).all()
    block = np.stack([src[7 + k * (n + 3) : 7 + k * (n + 3) + n] for k in range(n)])
    rows = np.stack([dst[11 + r * (n + 5) : 11 + r * (n + 5) + n] for r in range(n)])
    np.testing.assert_array_equal(rows, block.T)
    assert np.isnan(dst).sum() == dst.size - n * n  # nothing but the block's rows


@needs_jit
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_widened_sums_in_a_fixed_tree(rng, dtype):
    """vwload widens to float64 exactly; vsum adds the upper half onto the lower half until one
    lane is left, as the Python form does (the same bits), which is not left to right."""
    n = lanes(np.float64)
    a = rng.standard_normal(n + 3).astype(dtype)
    s = 0.3
    out = np.empty(3)
    wide_sums(out, a, 3, s)
    v = a[3:].astype(np.float64)
    np.testing.assert_array_equal(out[:2], [_simd.vsum(v), _simd.vsum(v * s + s)])
    np.testing.assert_allclose(out[2], _simd.vsum(s + v * v), rtol=1e-15)  # fma: one rounding
    tree = np.array([2.0**53, 1.0, -(2.0**53), 1.0] * (n // 4))  # (2^53 - 2^53) + (1 + 1) = 2
    out_tree = np.empty(3)
    wide_sums(out_tree, tree, 0, 0.0)
    assert out_tree[0] == _simd.vsum(tree) == 2.0 * (n // 4)
    assert sum(tree.tolist()) != out_tree[0]  # left to right loses the ones


def test_the_register_tiles_run_as_python(tmp_path):
    """NUMBA_DISABLE_JIT=1: conv3x3's forward and backward data (one tile straight into y, one
    through the rows of sums, and rows narrower than a vector), conv3x3s2's forward and
    backward data on a short plane, conv1x1's forward and backward data (three samples: a pair
    and one alone), the three backward filters (the filters or the taps in the lanes, a last
    vector part full; dy transposed in blocks) and BatchNorm's forward and backward, vector
    operations all plain Python, give the compiled kernels' numbers (float64: to the last bits
    of two roundings; float32 to its precision)."""
    code = """
        import numpy as np, sys
        import nnmem.kernels.cpu as K
        from nnmem.kernels import sizes
        rng = np.random.default_rng(0)
        for h, w in ((3, 17), (4, 4)):
            x = rng.standard_normal((2, 3, h, w))
            wt = rng.standard_normal((9, 3, 3, 3))
            dy = rng.standard_normal((2, 9, h, w))
            ws = np.empty(2 * sizes.conv3x3_workspace_per_sample(3, 9, h, w))
            y, dx = np.empty_like(dy), np.empty_like(x)
            K.conv3x3_forward(y, x, wt, ws)
            K.conv3x3_backward_data(dx, dy, wt, ws)
            np.save(sys.argv[1] + f"/y{h}.npy", y)
            np.save(sys.argv[1] + f"/dx{h}.npy", dx)
        x = rng.standard_normal((2, 3, 3, 5))  # conv3x3s2: a short plane's vector past it
        wt = rng.standard_normal((9, 3, 3, 3))
        y = np.empty((2, 9, 2, 3))
        ws = np.empty(2 * sizes.conv3x3s2_workspace_per_sample(3, 9, 3, 5))
        K.conv3x3s2_forward(y, x, wt, ws)
        np.save(sys.argv[1] + "/s2_y.npy", y)
        dx = np.empty_like(x)  # its backward data: the four phases' tiles, short planes paired
        K.conv3x3s2_backward_data(dx, rng.standard_normal(y.shape), wt, ws)
        np.save(sys.argv[1] + "/s2_dx.npy", dx)
        x = rng.standard_normal((3, 4, 3, 7))  # conv1x1: 21 pixels, 3 vectors: samples paired
        wt = rng.standard_normal((9, 4, 1, 1))
        y, dy = np.empty((3, 9, 3, 7)), rng.standard_normal((3, 9, 3, 7))
        K.conv1x1_forward(y, x, wt, np.empty(0), 1, 1)
        K.conv1x1_backward_data(x, dy, wt, np.empty(0), 1, 1)
        np.save(sys.argv[1] + "/p_y.npy", y)
        np.save(sys.argv[1] + "/p_dx.npy", x)
        x = rng.standard_normal((2, 2, 34, 34))  # im2col's backward filter: K = 18, a part-full
        dy = rng.standard_normal((2, 5, 32, 32))  # vector; groups of one sample, the second
        dw = np.empty((5, 2, 3, 3))  # continuing the first's sums
        per = sizes.conv2d_gemm_workspace_per_sample(2, 34, 34, 5, 3, 3, 1, 1, 0, 0)
        K.conv2d_backward_filter_gemm(dw, dy, x, np.full(per, np.nan), 1, 1, 0, 0)
        np.save(sys.argv[1] + "/g_dw.npy", dw)
        x = rng.standard_normal((3, 4, 6, 5))  # backward filters: 21 filters, 4 channels
        dy, dy2 = rng.standard_normal((3, 21, 6, 5)), rng.standard_normal((3, 21, 3, 3))
        dw = np.empty((21, 4, 3, 3))
        ws = np.empty(3 * sizes.conv3x3_workspace_per_sample(4, 21, 6, 5))
        K.conv3x3_backward_filter(dw, dy, x, ws)
        np.save(sys.argv[1] + "/dw.npy", dw)
        ws = np.empty(3 * sizes.conv3x3s2_workspace_per_sample(4, 21, 6, 5))
        K.conv3x3s2_backward_filter(dw, dy2, x, ws)
        np.save(sys.argv[1] + "/s2_dw.npy", dw)
        x16 = rng.standard_normal((2, 3, 4, 8))  # 16 filters of 32 pixels: dy transposed in
        dy16 = rng.standard_normal((2, 16, 4, 8))  # blocks of lanes x lanes (vtranspose)
        dw16 = np.empty((16, 3, 3, 3))
        ws16 = np.empty(2 * sizes.conv3x3_workspace_per_sample(3, 16, 4, 8))
        K.conv3x3_backward_filter(dw16, dy16, x16, ws16)
        np.save(sys.argv[1] + "/dw16.npy", dw16)
        y32 = np.empty((2, 16, 4, 8), np.float32)  # 8-pixel rows: narrow planes in float32
        ws32 = np.empty(2 * sizes.conv3x3_workspace_per_sample(3, 16, 4, 8), np.float32)
        K.conv3x3_forward(y32, x16.astype(np.float32), dw16.astype(np.float32), ws32)
        np.save(sys.argv[1] + "/y32.npy", y32)
        x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)  # BatchNorm's float64 sums
        ones, zeros = np.ones(3, np.float32), np.zeros(3, np.float32)
        y, mean, invstd = np.empty_like(x), np.empty(3, np.float32), np.empty(3, np.float32)
        running = zeros.copy(), ones.copy()
        K.batchnorm2d_forward_train(y, mean, invstd, *running, x, ones, zeros, 0.9, 1e-5)
        dx, dg, db = np.empty_like(x), np.empty(3, np.float32), np.empty(3, np.float32)
        K.batchnorm2d_backward(dx, dg, db, y, x, ones, mean, invstd)
        for name, a in (("bn_y", y), ("bn_mean", mean), ("bn_dx", dx), ("bn_dg", dg)):
            np.save(sys.argv[1] + f"/{name}.npy", a)
    """
    results = {}
    for jit in ("0", "1"):
        folder = tmp_path / jit
        folder.mkdir()
        env = dict(os.environ, NUMBA_DISABLE_JIT=jit)
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), str(folder)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        results[jit] = {p.name: np.load(p) for p in folder.iterdir()}
    assert len(results["0"]) == 17
    for name, compiled in results["0"].items():
        tolerance = 1e-6 if name.startswith("bn") else 1e-13  # float32 outputs
        np.testing.assert_allclose(results["1"][name], compiled, rtol=tolerance, atol=tolerance)


# AVX2 and the instructions that come with it on every CPU that has it: code compiled for
# "haswell" runs on any x86 CPU with AVX2, whatever its own name
HASWELL = "+avx,+avx2,+fma,+f16c,+popcnt,+bmi,+bmi2,+lzcnt,+movbe,+cx16,+sse4.2,+sse4.1"
HASWELL += ",+ssse3,+sse3,+sse2,+sse,+mmx,+cmov,+fxsr"


@needs_jit
@pytest.mark.skipif(
    "+avx2" not in binding.get_host_cpu_features().flatten().split(","),
    reason="needs a CPU with AVX2 to run code compiled for it",
)
def test_backward_filters_give_the_same_bits_at_any_vector_width(tmp_path):
    """The backward filters keep each sum in one lane (kernels/cpu/_filter_lanes.py, and
    _summed.py for im2col's): compiled for AVX2 (8 float32 lanes, one channel a loop) they give
    this CPU's bits (with AVX-512: 16 lanes, three channels a loop), 21 filters (a second vector
    part full) and 16; K = 175 and 125 taps of 5x5 filters (a last vector part full)."""
    code = """
        import hashlib, sys
        import numpy as np
        import nnmem.kernels.cpu as K
        from nnmem.kernels import sizes
        from nnmem.kernels.cpu._simd import VECTOR_BYTES
        rng = np.random.default_rng(0)
        out = []
        for n, c, h, o in ((4, 7, 12, 21), (3, 5, 9, 16)):
            x = rng.standard_normal((n, c, h, h)).astype(np.float32)
            dy = rng.standard_normal((n, o, h, h)).astype(np.float32)
            dw = np.empty((o, c, 3, 3), np.float32)
            ws = np.empty(n * sizes.conv3x3_workspace_per_sample(c, o, h, h), np.float32)
            K.conv3x3_backward_filter(dw, dy, x, ws)
            out.append(dw.tobytes())
            dy = rng.standard_normal((n, o, (h + 1) // 2, (h + 1) // 2)).astype(np.float32)
            ws = np.empty(n * sizes.conv3x3s2_workspace_per_sample(c, o, h, h), np.float32)
            K.conv3x3s2_backward_filter(dw, dy, x, ws)
            out.append(dw.tobytes())
            dy = rng.standard_normal((n, o, h - 4, h - 4)).astype(np.float32)  # 5x5, im2col
            dw = np.empty((o, c, 5, 5), np.float32)
            ws = np.empty(n * sizes.conv2d_gemm_workspace_per_sample(c, h, h, o, 5, 5, 1, 1, 0, 0),
                          np.float32)  # fmt: skip
            K.conv2d_backward_filter_gemm(dw, dy, x, ws, 1, 1, 0, 0)
            out.append(dw.tobytes())
        print(VECTOR_BYTES, hashlib.sha256(b"".join(out)).hexdigest())
    """
    results = []
    haswell = dict(NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES=HASWELL)
    for extra in ({}, dict(haswell, NUMBA_CACHE_DIR=str(tmp_path))):  # its code kept apart
        env = dict(os.environ, **extra)
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr
        results.append(run.stdout.split())
    assert results[1][0] == "32"  # the AVX2 build has 32-byte vectors
    assert results[0][1] == results[1][1]
