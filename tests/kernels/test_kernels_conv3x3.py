"""The 3x3 convolution kernels on padded planes (kernels/cpu/conv3x3.py) against the direct
kernels (themselves checked against a reference in test_kernels_conv.py): every pass, every
chunking of the batch (the same bits in each), float64 to rounding, float32 to its precision."""

import numba
import numpy as np
import pytest
from kernel_testutil import assert_close64

from nnmem.kernels.cpu import (
    conv2d_backward_data_direct,
    conv2d_backward_filter_direct,
    conv2d_forward_direct,
    conv3x3_backward_data,
    conv3x3_backward_filter,
    conv3x3_forward,
)
from nnmem.kernels.sizes import (
    conv3x3_applies,
    conv3x3_filter_need,
    conv3x3_filter_sample_group,
    conv3x3_workspace_per_sample,
    conv3x3s2_workspace_per_sample,
)

# (N, C, H, W, O). Backward filter sums groups of samples in one loop (CONV3X3_GROUP_ELEMENTS //
# plane samples, at least one), a vector of filters and three channels a loop:
# (7, 3, 24, 24, 5) has groups of 3 samples (3, 3, 1) and fewer filters than a vector's lanes,
# (2, 11, 4, 5, 3) a channel count that is not a multiple of three, (3, 2, 31, 30, 2) one sample
# a group (a plane of 1,058 elements), (2, 2, 45, 44, 3) planes longer than
# CONV3X3_GROUP_ELEMENTS (2,164), and (2, 4, 6, 6, 21) a second vector of filters, part full.
SHAPES = [(2, 3, 5, 4, 4), (3, 5, 7, 6, 4), (1, 1, 1, 1, 1), (4, 16, 8, 8, 16), (2, 2, 3, 9, 3)]
SHAPES += [(7, 3, 24, 24, 5), (2, 11, 4, 5, 3), (3, 2, 31, 30, 2), (2, 2, 45, 44, 3)]
SHAPES += [(2, 4, 6, 6, 21)]


def arrays(rng, shape, dtype=np.float64):
    n, c, h, w, o = shape
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c, 3, 3)).astype(dtype)
    dy = rng.standard_normal((n, o, h, w)).astype(dtype)
    return x, wt, dy


def direct_passes(x, wt, dy):
    y, dx, dw = np.empty_like(dy), np.empty_like(x), np.empty_like(wt)
    conv2d_forward_direct(y, x, wt, 1, 1, 1, 1)
    conv2d_backward_data_direct(dx, dy, wt, 1, 1, 1, 1)
    conv2d_backward_filter_direct(dw, dy, x, 1, 1, 1, 1)
    return y, dx, dw


def padded_passes(x, wt, dy, samples):
    """The three passes with a workspace of `samples` samples' planes (the batch in chunks), or
    of one sample group of backward filter where that is more (a smaller one is refused)."""
    n, c, h, w = x.shape
    samples = max(samples, conv3x3_filter_sample_group(n, h, w))
    ws = np.full(samples * conv3x3_workspace_per_sample(c, wt.shape[0], h, w), np.nan, x.dtype)
    y, dx, dw = (np.full_like(a, np.nan) for a in (dy, x, wt))
    conv3x3_forward(y, x, wt, ws)
    conv3x3_backward_data(dx, dy, wt, ws)
    conv3x3_backward_filter(dw, dy, x, ws)
    return y, dx, dw


def test_the_geometry_it_applies_to():
    assert conv3x3_applies(3, 3, 1, 1, 1, 1)
    for other in [(3, 3, 2, 2, 1, 1), (3, 3, 1, 1, 0, 0), (5, 5, 1, 1, 2, 2), (1, 1, 1, 1, 0, 0)]:
        assert not conv3x3_applies(*other)
    # the most of forward (C planes, O planes of sums), backward data (O planes, C of sums)
    # and backward filter (C planes, dy transposed: H*W*O, and a vector's room: 16), with
    # planes of (H+2)*(W+2)+2 and sums of H*(W+2): dy transposed is shorter than O planes of
    # sums by 2*H*O, so backward filter's is below forward's once 2*H*O passes 16 (it ties
    # here), the most only for tiny planes (1x8, one filter: 56 against 54)
    plane, sums = 7 * 9 + 2, 5 * 9
    assert conv3x3_filter_need(4, 6, 5, 7) == 4 * plane + 35 * 6 + 16  # 486
    assert conv3x3_workspace_per_sample(4, 6, 5, 7) == 6 * plane + 4 * sums  # data 570 > 530
    plane = 10 * 10 + 2
    assert conv3x3_workspace_per_sample(1, 16, 8, 8) == 16 * plane + 80  # data 1712 > 1382
    assert conv3x3_filter_need(16, 1, 8, 8) == 16 * plane + 64 + 16  # 1712: forward's, tied
    assert conv3x3_workspace_per_sample(16, 1, 8, 8) == 16 * plane + 80
    assert conv3x3_filter_need(1, 1, 1, 8) == 56 == conv3x3_workspace_per_sample(1, 1, 1, 8)
    # a plane with fewer sums than a vector (1x1: 3) gets a vector's (16), and its padded
    # planes the zeros that vector reads past them: 3*3+2 + 13
    assert conv3x3_workspace_per_sample(2, 3, 1, 1) == 3 * 24 + 2 * 16  # data 104 > 96, 55


@pytest.mark.parametrize("shape", SHAPES)
def test_every_pass_matches_the_direct_kernels_in_every_chunking(rng, shape):
    """float64: the direct kernels' sums to rounding, and the same bits whether the batch runs
    in one chunk or one sample (or group) at a time or five (backward filter adds its groups'
    sums in order, whatever the chunks)."""
    x, wt, dy = arrays(rng, shape)
    expected = direct_passes(x, wt, dy)
    results = [padded_passes(x, wt, dy, samples) for samples in sorted({1, 2, 5, shape[0]})]
    for result in results:
        for got, want, first in zip(result, expected, results[0]):
            assert_close64(got, want, rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal(got, first)


def test_float32_to_its_precision(rng):
    x, wt, dy = arrays(rng, (4, 16, 12, 12, 8), np.float32)
    expected = direct_passes(*(a.astype(np.float64) for a in (x, wt, dy)))
    for got, want in zip(padded_passes(x, wt, dy, 4), expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_the_same_bits_on_any_number_of_threads(rng):
    x, wt, dy = arrays(rng, (4, 8, 10, 10, 8), np.float32)
    before = numba.get_num_threads()
    results = []
    try:
        for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
            numba.set_num_threads(threads)
            results.append(padded_passes(x, wt, dy, 4))
    finally:
        numba.set_num_threads(before)
    for result in results[1:]:
        for got, first in zip(result, results[0]):
            np.testing.assert_array_equal(got, first)


def test_nan_and_inf_propagate(rng):
    """A NaN or infinite input reaches every output it reaches in the direct kernels, as NaN
    or infinity. One difference, from the padding: backward filter multiplies the zeros of x's
    border with dy, and 0 * inf or 0 * NaN is NaN (IEEE) where the direct kernel skips those
    terms; so backward filter may be NaN in a few more entries, never finite where the direct
    one is not."""
    x, wt, dy = arrays(rng, (2, 3, 6, 6, 4))
    x[0, 1, 2, 3] = np.nan
    dy[1, 2, 0, 0] = np.inf
    y, dx, dw = padded_passes(x, wt, dy, 2)
    want_y, want_dx, want_dw = direct_passes(x, wt, dy)
    for got, want in ((y, want_y), (dx, want_dx)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert not np.any(np.isfinite(dw) & ~np.isfinite(want_dw))
    x2, wt2, dy2 = arrays(rng, (2, 3, 6, 6, 4))
    x2[1, 0, 5, 5] = np.nan  # a NaN in x alone
    got, want = padded_passes(x2, wt2, dy2, 1)[2], direct_passes(x2, wt2, dy2)[2]
    assert np.isnan(want).any()
    assert not np.any(np.isfinite(got) & ~np.isfinite(want))


def test_bad_shapes_and_small_workspaces_are_refused(rng):
    x, wt, dy = arrays(rng, (2, 3, 5, 5, 4))
    ws = np.empty(conv3x3_workspace_per_sample(3, 4, 5, 5))
    with pytest.raises(ValueError, match="the input's H and W"):
        conv3x3_forward(np.empty((2, 4, 4, 4)), x, wt, ws)
    with pytest.raises(ValueError, match=r"\(O, C, 3, 3\)"):
        conv3x3_forward(np.empty((2, 4, 5, 5)), x, wt[:, :, :2], ws)
    plane, sums = 7 * 7 + 2, 5 * 7
    # backward filter: one group (both samples) of C planes, dy transposed and a vector's room
    group = 2 * (3 * plane + 5 * 5 * 4 + 16)
    assert group == 2 * conv3x3_filter_need(3, 4, 5, 5) and ws.size < group
    with pytest.raises(ValueError, match=rf"2 sample\(s\) of this pass need {group}"):
        conv3x3_backward_filter(np.empty_like(wt), dy, x, np.empty(group - 1))
    conv3x3_backward_filter(np.empty_like(wt), dy, x, np.empty(group))  # exactly enough
    with pytest.raises(ValueError, match=r"1 sample\(s\) of this pass need"):  # planes, sums
        conv3x3_forward(np.empty((2, 4, 5, 5)), x, wt, ws[: 3 * plane + 4 * sums - 1])
    conv3x3_forward(np.empty((2, 4, 5, 5)), x, wt, ws[: 3 * plane + 4 * sums])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_through_rows_give_the_bits_written_straight(rng, dtype):
    """Forward and backward data write a C-contiguous output straight from the register tiles
    when its rows hold a vector, and go through the row-padded sums otherwise (a plane too
    narrow, or an output that is a view): the same bits either way."""
    x, wt, dy = arrays(rng, (3, 5, 17, 20, 11), dtype)
    ws = np.empty(3 * conv3x3_workspace_per_sample(5, 11, 17, 20), dtype)
    straight = np.empty_like(dy), np.empty_like(x)
    conv3x3_forward(straight[0], x, wt, ws)
    conv3x3_backward_data(straight[1], dy, wt, ws)
    wide_y = np.full((3, 12, 17, 20), np.nan, dtype)  # every plane of [:, :11] a view
    wide_dx = np.full((3, 6, 17, 20), np.nan, dtype)
    conv3x3_forward(wide_y[:, :11], x, wt, ws)
    conv3x3_backward_data(wide_dx[:, :5], dy, wt, ws)
    np.testing.assert_array_equal(wide_y[:, :11], straight[0])
    np.testing.assert_array_equal(wide_dx[:, :5], straight[1])
    assert np.isnan(wide_y[:, 11]).all() and np.isnan(wide_dx[:, 5]).all()  # nothing else


@pytest.mark.parametrize("stride", [1, 2])
def test_backward_filter_the_same_bits_in_any_channel_sets(rng, monkeypatch, stride):
    """Backward filter cuts the channels into as many sets (tasks) as the threads want
    (_filter_lanes.channel_sets): each dw entry is the same chain of multiply-adds in any of
    them, a set of one loop of channels, of several, or of all."""
    from nnmem.kernels.cpu import conv3x3, conv3x3s2

    x = rng.standard_normal((3, 10, 7, 6)).astype(np.float32)
    oh, ow = (7, 6) if stride == 1 else (4, 3)
    dy = rng.standard_normal((3, 19, oh, ow)).astype(np.float32)
    module, per_sample = (
        (conv3x3, conv3x3_workspace_per_sample)
        if stride == 1
        else (conv3x3s2, conv3x3s2_workspace_per_sample)
    )
    kernel = getattr(module, f"{module.__name__.split('.')[-1]}_backward_filter")
    ws = np.empty(3 * per_sample(10, 19, 7, 6), np.float32)
    results = []
    for sets in range(1, 11):
        monkeypatch.setattr(module, "channel_sets", lambda *args, sets=sets: sets)
        dw = np.full((19, 10, 3, 3), np.nan, np.float32)
        kernel(dw, dy, x, ws)
        results.append(dw)
    for dw in results[1:]:
        np.testing.assert_array_equal(dw, results[0])
    want = np.empty((19, 10, 3, 3))  # and the sums themselves, against the direct kernel
    direct = conv2d_backward_filter_direct
    direct(want, dy.astype(np.float64), x.astype(np.float64), stride, stride, 1, 1)
    np.testing.assert_allclose(results[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# (N, C, H, W, O, dtype) whose rows are narrower than a vector and divide it (_narrow.py): two
# 8-pixel rows a float32 vector (with AVX-512), four 4-pixel rows; a 4x4 float32 plane is one
# vector, so tiles pair the samples, the last of an odd batch with itself
NARROW = [(3, 5, 8, 8, 11, np.float32), (3, 9, 4, 4, 3, np.float32), (5, 4, 8, 4, 9, np.float64)]


@pytest.mark.parametrize("n, c, h, w, o, dtype", NARROW)
def test_narrow_planes_give_the_bits_of_the_row_padded_sums(rng, n, c, h, w, o, dtype):
    """Forward and backward data on rows narrower than a vector: with a C-contiguous output on
    the narrow planes (which leave the rest of the workspace untouched), into a view through the
    row-padded sums (which use it): the same bits, and the direct kernels' sums."""
    from nnmem.kernels.cpu import _narrow
    from nnmem.kernels.cpu._simd import lanes

    x, wt, dy = arrays(rng, (n, c, h, w, o), dtype)
    if w >= lanes(dtype):
        pytest.skip("rows this wide hold a vector on this CPU (AVX2)")
    ws = np.full(n * conv3x3_workspace_per_sample(c, o, h, w), np.nan, dtype)
    y, dx = np.empty_like(dy), np.empty_like(x)
    conv3x3_forward(y, x, wt, ws)
    conv3x3_backward_data(dx, dy, wt, ws)
    used = n * max(c, o) * _narrow.plane(h, w)
    assert np.isnan(ws[used:]).all() and not np.isnan(ws[:used]).any()
    wide_y, wide_dx = np.empty((n, o + 1, h, w), dtype), np.empty((n, c + 1, h, w), dtype)
    conv3x3_forward(wide_y[:, :o], x, wt, ws)
    conv3x3_backward_data(wide_dx[:, :c], dy, wt, ws)
    assert not np.isnan(ws[used:]).all()  # the row-padded sums ran
    np.testing.assert_array_equal(wide_y[:, :o], y)
    np.testing.assert_array_equal(wide_dx[:, :c], dx)
    want_y, want_dx, _ = direct_passes(*(a.astype(np.float64) for a in (x, wt, dy)))
    for got, want in ((y, want_y), (dx, want_dx)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_narrow_planes_keep_the_next_rows_infinities_out(rng):
    """The narrow planes' taps at a row's first and last column read the neighbouring row's
    pixel and mask it: an infinity or a NaN at a row's end reaches only the outputs that the
    direct kernel gives it to (a mask by multiplying with zero would make the others NaN)."""
    x, wt, dy = arrays(rng, (2, 3, 8, 8, 4), np.float32)
    x[0, 1, 3, 0], x[1, 2, 5, 7], x[1, 0, 0, 7] = np.inf, np.nan, -np.inf
    dy[0, 2, 6, 7], dy[1, 3, 2, 0] = np.nan, np.inf
    ws = np.empty(2 * conv3x3_workspace_per_sample(3, 4, 8, 8), np.float32)
    y, dx = np.empty_like(dy), np.empty_like(x)
    conv3x3_forward(y, x, wt, ws)
    conv3x3_backward_data(dx, dy, wt, ws)
    want_y, want_dx, _ = direct_passes(*(a.astype(np.float64) for a in (x, wt, dy)))
    for got, want in ((y, want_y), (dx, want_dx)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def test_read_only_inputs_are_read(rng):
    """The passes only read x, w and dy: arrays that cannot be written (a view of a read-only
    buffer) give the writable arrays' bits, dy's transpose in blocks included (16 filters of
    4x8 pixels in float64: whole vectors, with AVX-512 or AVX2)."""
    x, wt, dy = arrays(rng, (3, 5, 4, 8, 16))
    want = padded_passes(x, wt, dy, 3)
    for a in (x, wt, dy):
        a.flags.writeable = False
    for got, expected in zip(padded_passes(x, wt, dy, 3), want):
        np.testing.assert_array_equal(got, expected)
