"""The stride-2 3x3 convolution kernels on phase planes (kernels/cpu/conv3x3s2.py) and the 1x1
ones on per-sample GEMMs (kernels/cpu/conv1x1.py) against the direct kernels (themselves
checked against a reference in test_kernels_conv.py): every pass, every chunking of the batch
and every thread count (the same bits in each), float64 to rounding, float32 to its precision,
and the adjoint identities that make the backward passes the forward's transposes."""

import numba
import numpy as np
import pytest
from kernel_testutil import assert_close64

from nnmem.kernels.cpu import (
    _phases,
    blas,
    conv1x1_backward_data,
    conv1x1_backward_filter,
    conv1x1_forward,
    conv2d_backward_data_direct,
    conv2d_backward_filter_direct,
    conv2d_forward_direct,
    conv3x3s2_backward_data,
    conv3x3s2_backward_filter,
    conv3x3s2_forward,
)
from nnmem.kernels.sizes import (
    conv1x1_applies,
    conv1x1_workspace_per_sample,
    conv3x3s2_applies,
    conv3x3s2_filter_need,
    conv3x3s2_filter_sample_group,
    conv3x3s2_phase_plane,
    conv3x3s2_workspace_per_sample,
)

# (N, C, H, W, O): odd and even heights and widths (an odd one's last phase row is partly
# padding), odd channels and filters (the spare partner planes), one pixel, channel counts not
# a multiple of backward filter's three a loop, backward filter's groups of 2048 // plane
# samples: (7, 3, 40, 40, 5) has groups of 4 (4, 3; planes of 442), (5, 2, 63, 61, 3) one
# sample a group (a plane of 1,057), (2, 2, 95, 94, 3) planes longer than the group (2,353),
# and (2, 4, 9, 8, 19) a second vector of filters, part full.
SHAPES = [(2, 3, 5, 4, 4), (3, 5, 7, 6, 3), (1, 1, 1, 1, 1), (4, 16, 8, 8, 16), (2, 2, 3, 9, 3)]
SHAPES += [(7, 3, 40, 40, 5), (2, 11, 4, 5, 3), (5, 2, 63, 61, 3), (2, 2, 95, 94, 3)]
SHAPES += [(2, 4, 9, 8, 19)]


def arrays(rng, shape, dtype=np.float64):
    n, c, h, w, o = shape
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c, 3, 3)).astype(dtype)
    dy = rng.standard_normal((n, o, (h + 1) // 2, (w + 1) // 2)).astype(dtype)
    return x, wt, dy


def direct_passes(x, wt, dy):
    y, dx, dw = np.empty_like(dy), np.empty_like(x), np.empty_like(wt)
    conv2d_forward_direct(y, x, wt, 2, 2, 1, 1)
    conv2d_backward_data_direct(dx, dy, wt, 2, 2, 1, 1)
    conv2d_backward_filter_direct(dw, dy, x, 2, 2, 1, 1)
    return y, dx, dw


def phase_passes(x, wt, dy, samples):
    """The three passes with a workspace of `samples` samples (the batch in chunks), or of one
    sample group of backward filter where that is more (a smaller one is refused); the
    workspace of each pass starts as NaN, so that a read of an element it did not write shows."""
    n, c, h, w = x.shape
    samples = max(samples, conv3x3s2_filter_sample_group(n, dy.shape[2], dy.shape[3]))
    size = samples * conv3x3s2_workspace_per_sample(c, wt.shape[0], h, w)
    y, dx, dw = (np.full_like(a, np.nan) for a in (dy, x, wt))
    conv3x3s2_forward(y, x, wt, np.full(size, np.nan, x.dtype))
    conv3x3s2_backward_data(dx, dy, wt, np.full(size, np.nan, x.dtype))
    conv3x3s2_backward_filter(dw, dy, x, np.full(size, np.nan, x.dtype))
    return y, dx, dw


def test_the_geometry_it_applies_to():
    assert conv3x3s2_applies(3, 3, 2, 2, 1, 1)
    for other in [(3, 3, 1, 1, 1, 1), (3, 3, 2, 2, 0, 0), (3, 3, 2, 1, 1, 1), (1, 1, 2, 2, 0, 0)]:
        assert not conv3x3s2_applies(*other)
    # 5x4 input, output 3x2, W2 = 3: phase planes (3+1)*3+1 = 13, sums 3*3 a plane but a
    # vector (16) at least: forward 4*4*13 + 6*16 + (16 - 9) = 311 (the last term: room for a
    # short plane's reads); backward data's phase sums a row and a vector, 3 + 16 = 19, and
    # dy's padded planes as much as they read, 19 + 3 + 1 = 23: data 6*23 + 4*4*19 = 442;
    # filter (16+6)*13 = 286
    assert conv3x3s2_workspace_per_sample(4, 6, 5, 4) == 442
    assert conv3x3s2_filter_need(4, 6, 3, 2) == 260


@pytest.mark.parametrize("shape", SHAPES)
def test_every_pass_matches_the_direct_kernels_in_every_chunking(rng, shape):
    """float64: the direct kernels' sums to rounding, and the same bits whether the batch runs
    in one chunk or one sample (or group) at a time or five."""
    x, wt, dy = arrays(rng, shape)
    expected = direct_passes(x, wt, dy)
    results = [phase_passes(x, wt, dy, samples) for samples in sorted({1, 2, 5, shape[0]})]
    for result in results:
        for got, want, first in zip(result, expected, results[0]):
            assert_close64(got, want, rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal(got, first)


@pytest.mark.parametrize("shape", [(3, 5, 7, 6, 3), (2, 4, 8, 9, 5)])
def test_the_backward_passes_are_the_forward_adjoints(rng, shape):
    """<conv(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_filter(dy, x)>."""
    x, wt, dy = arrays(rng, shape)
    y, dx, dw = phase_passes(x, wt, dy, shape[0])
    forward = np.vdot(y, dy)
    assert np.vdot(x, dx) == pytest.approx(forward, rel=1e-12)
    assert np.vdot(wt, dw) == pytest.approx(forward, rel=1e-12)


def test_float32_to_its_precision(rng):
    x, wt, dy = arrays(rng, (4, 16, 12, 11, 8), np.float32)
    expected = direct_passes(*(a.astype(np.float64) for a in (x, wt, dy)))
    for got, want in zip(phase_passes(x, wt, dy, 4), expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_the_same_bits_on_any_number_of_threads(rng):
    x, wt, dy = arrays(rng, (4, 9, 10, 10, 8), np.float32)
    before = numba.get_num_threads()
    results = []
    try:
        for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
            numba.set_num_threads(threads)
            results.append(phase_passes(x, wt, dy, 4))
    finally:
        numba.set_num_threads(before)
    for result in results[1:]:
        for got, first in zip(result, results[0]):
            np.testing.assert_array_equal(got, first)


def test_nan_and_inf_propagate(rng):
    """A NaN or infinite input reaches every output it reaches in the direct kernels; backward
    filter may be NaN in a few more entries (0 * inf in the padding: conv3x3s2.py), never
    finite where the direct one is not."""
    x, wt, dy = arrays(rng, (2, 3, 7, 6, 4))
    x[0, 1, 2, 3] = np.nan
    dy[1, 2, 0, 0] = np.inf
    y, dx, dw = phase_passes(x, wt, dy, 2)
    want_y, want_dx, want_dw = direct_passes(x, wt, dy)
    for got, want in ((y, want_y), (dx, want_dx)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert not np.any(np.isfinite(dw) & ~np.isfinite(want_dw))


def test_bad_shapes_and_small_workspaces_are_refused(rng):
    x, wt, dy = arrays(rng, (2, 3, 5, 5, 4))
    ws = np.empty(conv3x3s2_workspace_per_sample(3, 4, 5, 5))
    with pytest.raises(ValueError, match=r"ceil\(H/2\)"):
        conv3x3s2_forward(np.empty((2, 4, 2, 3)), x, wt, ws)
    with pytest.raises(ValueError, match=r"\(O, C, 3, 3\)"):
        conv3x3s2_forward(np.empty_like(dy), x, wt[:, :, :2], ws)
    group = 2 * conv3x3s2_filter_need(3, 4, 3, 3)  # both samples are one group
    assert conv3x3s2_filter_sample_group(2, 3, 3) == 2 and ws.size < group
    with pytest.raises(ValueError, match=rf"2 sample\(s\) of this pass need {group}"):
        conv3x3s2_backward_filter(np.empty_like(wt), dy, x, np.empty(group - 1))
    conv3x3s2_backward_filter(np.empty_like(wt), dy, x, np.empty(group))  # exactly enough


# ---------------------------------------------------------------- 1x1 (kernels/cpu/conv1x1.py)
# (N, C, H, W, O, stride): stride 1 (no workspace), 2 and uneven (2, 3); odd sizes; backward
# filter's blocks of rows (O > C) and of columns (O <= C), more than one block (C > 64); and in
# the channel lanes (a stride, C a multiple of the lanes: 16 and 24 float64 channels, two and
# three vectors with AVX-512; O not a multiple of the tile's eight filters)
SHAPES_1X1 = [(3, 5, 7, 6, 3, (1, 1)), (2, 4, 7, 5, 6, (2, 2)), (4, 3, 8, 9, 5, (2, 3))]
SHAPES_1X1 += [(1, 1, 1, 1, 1, (2, 2)), (3, 130, 5, 4, 7, (2, 2)), (2, 6, 4, 5, 140, (1, 1))]
SHAPES_1X1 += [(3, 16, 7, 6, 11, (2, 2)), (5, 24, 5, 9, 19, (2, 3))]


def arrays_1x1(rng, shape, dtype=np.float64):
    n, c, h, w, o, (sh, sw) = shape
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c, 1, 1)).astype(dtype)
    dy = rng.standard_normal((n, o, (h - 1) // sh + 1, (w - 1) // sw + 1)).astype(dtype)
    return x, wt, dy


def direct_1x1(x, wt, dy, stride):
    y, dx, dw = np.empty_like(dy), np.empty_like(x), np.empty_like(wt)
    conv2d_forward_direct(y, x, wt, *stride, 0, 0)
    conv2d_backward_data_direct(dx, dy, wt, *stride, 0, 0)
    conv2d_backward_filter_direct(dw, dy, x, *stride, 0, 0)
    return y, dx, dw


def gemm_1x1(x, wt, dy, stride, samples):
    """The three conv1x1 passes, each with a fresh NaN workspace of `samples` samples."""
    n, c, h, w = x.shape
    size = samples * conv1x1_workspace_per_sample(c, h, w, *stride)
    y, dx, dw = (np.full_like(a, np.nan) for a in (dy, x, wt))
    conv1x1_forward(y, x, wt, np.full(size, np.nan, x.dtype), *stride)
    conv1x1_backward_data(dx, dy, wt, np.full(size, np.nan, x.dtype), *stride)
    conv1x1_backward_filter(dw, dy, x, np.full(size, np.nan, x.dtype), *stride)
    return y, dx, dw


def test_1x1_geometry_and_workspace():
    assert conv1x1_applies(1, 1, 1, 1, 0, 0) and conv1x1_applies(1, 1, 2, 3, 0, 0)
    assert not conv1x1_applies(1, 1, 1, 1, 1, 1) and not conv1x1_applies(3, 3, 2, 2, 0, 0)
    assert conv1x1_workspace_per_sample(16, 32, 32, 1, 1) == 0  # x's own planes
    assert conv1x1_workspace_per_sample(16, 32, 31, 2, 2) == 16 * 16 * 16  # the kept pixels


@pytest.mark.parametrize("shape", SHAPES_1X1)
def test_1x1_matches_the_direct_kernels_in_every_chunking(rng, shape):
    x, wt, dy = arrays_1x1(rng, shape)
    stride = shape[5]
    expected = direct_1x1(x, wt, dy, stride)
    results = [gemm_1x1(x, wt, dy, stride, samples) for samples in sorted({1, 2, shape[0]})]
    for result in results:
        for got, want, first in zip(result, expected, results[0]):
            assert_close64(got, want, rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal(got, first)
    y, dx, dw = results[0]
    assert np.vdot(x, dx) == pytest.approx(np.vdot(y, dy), rel=1e-12)  # the adjoints
    assert np.vdot(wt, dw) == pytest.approx(np.vdot(y, dy), rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [70, 32])  # products in GEMMs; in the channel lanes
def test_1x1_the_same_bits_on_any_number_of_threads(rng, dtype, channels):
    shape = (5, channels, 6, 6, 9, (2, 2))
    x, wt, dy = arrays_1x1(rng, shape, dtype)
    before = numba.get_num_threads()
    results = []
    try:
        for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
            numba.set_num_threads(threads)
            results.append(gemm_1x1(x, wt, dy, shape[5], 5))
    finally:
        numba.set_num_threads(before)
    for result in results[1:]:
        for got, first in zip(result, results[0]):
            np.testing.assert_array_equal(got, first)


def test_1x1_bad_shapes_and_small_workspaces_are_refused(rng):
    x, wt, dy = arrays_1x1(rng, (2, 3, 5, 5, 4, (2, 2)))
    ws = np.empty(2 * conv1x1_workspace_per_sample(3, 5, 5, 2, 2))
    with pytest.raises(ValueError, match=r"\(O, C, 1, 1\)"):
        conv1x1_forward(np.empty_like(dy), x, np.empty((4, 3, 3, 3)), ws, 2, 2)
    with pytest.raises(ValueError, match=r"\(H-1\)//sh\+1"):
        conv1x1_forward(np.empty_like(dy), x, wt, ws, 1, 1)
    with pytest.raises(ValueError, match="one sample needs 27"):
        conv1x1_backward_filter(np.empty_like(wt), dy, x, ws[:26], 2, 2)
    with pytest.raises(ValueError, match="C-contiguous float64"):
        conv1x1_forward(np.empty_like(dy), x, wt, ws.astype(np.float32), 2, 2)


@pytest.mark.parametrize("channel_major", [False, True])
def test_the_layouts_serial_and_parallel_agree(rng, channel_major):
    """The phase-plane copies run in parallel from PARALLEL_FROM elements (by_size): both
    versions write the same planes, zeros included."""
    x = rng.standard_normal((3, 4, 7, 6))
    dy = rng.standard_normal((3, 5, 4, 3))
    plane = conv3x3s2_phase_plane(4, 3)
    shape = (4, 4, 3, plane) if channel_major else (3, 4, 4, plane)
    got = []
    for version in ("serial", "parallel"):
        phases, planes = np.full(shape, np.nan), np.full((3, 5, plane), np.nan)
        getattr(_phases.split, version)(phases, x, channel_major)
        getattr(_phases.rows, version)(planes, dy, 4)
        got.append((phases, planes))
    for a, b in zip(*got):
        assert not np.isnan(a).any()
        np.testing.assert_array_equal(a, b)


def test_1x1_backward_filter_in_the_channel_lanes_where_it_applies(rng):
    """Backward filter runs in the channel lanes with a stride and C a multiple of the lanes
    (float32 and float64), in GEMMs otherwise: the lanes leave no NaN of the workspace in dw
    and give the direct kernel's sums, a sample's chain from zero added to the others in
    sample order (a float32 sum to its precision), and its NaN and infinite entries."""
    from nnmem.kernels.cpu import conv1x1
    from nnmem.kernels.cpu._simd import lanes

    for dtype in (np.float32, np.float64):
        c = 2 * lanes(dtype)
        dw = np.empty((13, c, 1, 1), dtype)
        assert conv1x1.in_lanes(dw, 2, 2) and conv1x1.in_lanes(dw, 1, 2)
        assert not conv1x1.in_lanes(dw, 1, 1)  # no gather: x's own planes, in GEMMs
        assert not conv1x1.in_lanes(np.empty((13, c + 1, 1, 1), dtype), 2, 2)
        x, wt, dy = arrays_1x1(rng, (6, c, 9, 8, 13, (2, 2)), dtype)
        want = direct_1x1(*(a.astype(np.float64) for a in (x, wt, dy)), (2, 2))[2]
        ws = np.full(4 * conv1x1_workspace_per_sample(c, 9, 8, 2, 2), np.nan, dtype)
        conv1x1_backward_filter(dw, dy, x, ws, 2, 2)  # chunks of 4 and 2 samples
        tolerance = 1e-5 if dtype == np.float32 else 1e-13
        np.testing.assert_allclose(dw, want, rtol=tolerance, atol=tolerance * np.abs(want).max())
        x[2, 3, 4, 6], x[5, 0, 1, 1] = np.nan, np.inf  # a kept pixel, and one the stride skips
        dy[1, 7, 0, 2] = -np.inf
        conv1x1_backward_filter(dw, dy, x, ws, 2, 2)
        want = direct_1x1(*(a.astype(np.float64) for a in (x, wt, dy)), (2, 2))[2]
        np.testing.assert_array_equal(np.isnan(dw), np.isnan(want))  # the direct kernel's
        np.testing.assert_array_equal(np.isinf(dw), np.isinf(want))  # non-finite entries
        assert np.isnan(dw[:, 3]).all() and np.isfinite(dw[:, 0]).any()


def test_1x1_without_openblas(rng, monkeypatch):
    """Without NumPy's OpenBLAS (blas.FOUND None) np.matmul makes each product: the same sums
    to rounding."""
    shape = (3, 5, 6, 5, 4, (2, 2))
    x, wt, dy = arrays_1x1(rng, shape)
    expected = direct_1x1(x, wt, dy, shape[5])
    monkeypatch.setattr(blas, "FOUND", None)
    for got, want in zip(gemm_1x1(x, wt, dy, shape[5], 2), expected):
        assert_close64(got, want, rtol=1e-12, atol=1e-12)
