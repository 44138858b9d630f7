"""conv2d kernels: direct and im2col+GEMM algorithms against a NumPy reference."""

import numpy as np
import pytest
from kernel_testutil import assert_adjoint, assert_close64

from nnmem.kernels.cpu import (
    col2im,
    conv2d_backward_data_direct,
    conv2d_backward_data_gemm,
    conv2d_backward_filter_direct,
    conv2d_backward_filter_gemm,
    conv2d_forward_direct,
    conv2d_forward_gemm,
    im2col,
)
from nnmem.kernels.sizes import (
    conv2d_gemm_sample_group,
    conv2d_gemm_workspace_per_sample,
    conv2d_output_shape,
)

# (n, c, h, w, o, kh, kw, sh, sw, ph, pw)
SHAPES = [
    (2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1),  # odd sizes, padding 1
    (1, 2, 9, 8, 3, 3, 2, 2, 2, 1, 2),  # batch 1, stride 2, non-square kernel, pad >= kw
    (3, 1, 5, 5, 2, 5, 5, 1, 1, 0, 0),  # kernel covers the input: 1x1 output
    (2, 2, 6, 7, 3, 1, 3, 2, 1, 0, 1),  # 1x3 kernel, mixed strides
    (2, 3, 5, 5, 4, 3, 3, 1, 1, 0, 0),  # OH*OW < C*KH*KW
    (3, 2, 8, 8, 3, 4, 2, 3, 2, 2, 1),  # stride 3, padding 2
    (2, 3, 8, 8, 4, 3, 3, 2, 2, 1, 1),  # ResNet-style 3x3 / stride 2 / padding 1
    (1, 2, 5, 5, 3, 5, 5, 1, 1, 0, 0),  # dw (3 x 50) larger than a group's workspace (53)
    (3, 2, 32, 32, 3, 3, 3, 1, 1, 1, 1),  # 1024 output pixels: a sample group of one sample
    # the SINGA CNN's 5x5 layer: a group's im2col matrix (500 x 1024 doubles, 4 MiB) is past
    # _tiles.INNER_FROM, the tiles' blocks of filters run innermost; the last group one sample
    (17, 20, 12, 12, 50, 5, 5, 1, 1, 0, 0),
]


# ---------------------------------------------------------------- NumPy reference (float64)
def _patches(xp, p, q, sh, sw, oh, ow):
    """xp[:, :, i*sh+p, j*sw+q] for all i, j: the input pixels met by kernel tap (p, q)."""
    return xp[:, :, p : p + sh * (oh - 1) + 1 : sh, q : q + sw * (ow - 1) + 1 : sw]


def ref_forward(x, w, sh, sw, ph, pw):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    _, _, oh, ow = conv2d_output_shape(n, c, h, wd, o, kh, kw, sh, sw, ph, pw)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    y = np.zeros((n, o, oh, ow))
    for p in range(kh):
        for q in range(kw):
            y += np.einsum("ncij,oc->noij", _patches(xp, p, q, sh, sw, oh, ow), w[:, :, p, q])
    return y


def ref_backward_data(dy, w, x_shape, sh, sw, ph, pw):
    n, c, h, wd = x_shape
    o, _, kh, kw = w.shape
    oh, ow = dy.shape[2:]
    dxp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    for p in range(kh):
        for q in range(kw):
            _patches(dxp, p, q, sh, sw, oh, ow)[...] += np.einsum(
                "noij,oc->ncij", dy, w[:, :, p, q]
            )
    return dxp[:, :, ph : ph + h, pw : pw + wd]


def ref_backward_filter(dy, x, w_shape, sh, sw, ph, pw):
    o, c, kh, kw = w_shape
    oh, ow = dy.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    dw = np.zeros(w_shape)
    for p in range(kh):
        for q in range(kw):
            dw[:, :, p, q] = np.einsum("noij,ncij->oc", dy, _patches(xp, p, q, sh, sw, oh, ow))
    return dw


def ref_im2col(x, kh, kw, sh, sw, ph, pw):
    """Documented layout: cols[(c*KH+p)*KW+q, (b*OH+i)*OW+j] = xpad[b, c, i*sh+p, j*sw+q]."""
    n, c, h, wd = x.shape
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (wd + 2 * pw - kw) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = np.zeros((c, kh, kw, n, oh, ow))
    for p in range(kh):
        for q in range(kw):
            cols[:, p, q] = _patches(xp, p, q, sh, sw, oh, ow).transpose(1, 0, 2, 3)
    return cols.reshape(c * kh * kw, n * oh * ow)


def make_case(rng, shape, dtype=np.float64):
    n, c, h, wd, o, kh, kw, sh, sw, ph, pw = shape
    ysh = conv2d_output_shape(n, c, h, wd, o, kh, kw, sh, sw, ph, pw)
    x = rng.standard_normal((n, c, h, wd)).astype(dtype)
    w = rng.standard_normal((o, c, kh, kw)).astype(dtype)
    dy = rng.standard_normal(ysh).astype(dtype)
    per = conv2d_gemm_workspace_per_sample(c, h, wd, o, kh, kw, sh, sw, ph, pw)
    return x, w, dy, per, (sh, sw, ph, pw)


# ---------------------------------------------------------------- tests
def test_output_shape():
    assert conv2d_output_shape(64, 1, 28, 28, 20, 5, 5, 1, 1, 0, 0) == (64, 20, 24, 24)
    assert conv2d_output_shape(1, 3, 9, 8, 3, 3, 2, 2, 2, 1, 2) == (1, 3, 5, 6)
    with pytest.raises(ValueError, match="larger than the padded input"):
        conv2d_output_shape(1, 1, 3, 3, 1, 5, 5, 1, 1, 0, 0)


def test_workspace_per_sample():
    # MNIST conv2: (20*5*5 + 50) * 8*8
    assert conv2d_gemm_workspace_per_sample(20, 12, 12, 50, 5, 5, 1, 1, 0, 0) == (500 + 50) * 64


@pytest.mark.parametrize("shape", SHAPES)
def test_direct_matches_reference(rng, shape):
    x, w, dy, _, s = make_case(rng, shape)
    y = np.empty(dy.shape)
    conv2d_forward_direct(y, x, w, *s)
    assert_close64(y, ref_forward(x, w, *s))
    dx = np.full(x.shape, np.nan)  # garbage in dx must be overwritten
    conv2d_backward_data_direct(dx, dy, w, *s)
    assert_close64(dx, ref_backward_data(dy, w, x.shape, *s))
    dw = np.full(w.shape, np.nan)
    conv2d_backward_filter_direct(dw, dy, x, *s)
    assert_close64(dw, ref_backward_filter(dy, x, w.shape, *s))


@pytest.mark.parametrize("shape", SHAPES)
def test_direct_adjoint(rng, shape):
    x, w, dy, _, s = make_case(rng, shape)
    y = np.empty(dy.shape)
    conv2d_forward_direct(y, x, w, *s)
    dx = np.empty(x.shape)
    conv2d_backward_data_direct(dx, dy, w, *s)
    assert_adjoint(dy, y, dx, x)
    dw = np.empty(w.shape)
    conv2d_backward_filter_direct(dw, dy, x, *s)
    assert_adjoint(dy, y, dw, w)


@pytest.mark.parametrize("shape", SHAPES)
def test_im2col_layout_and_col2im_adjoint(rng, shape):
    x, w, _, _, (sh, sw, ph, pw) = make_case(rng, shape)
    kh, kw = w.shape[2:]
    expect = ref_im2col(x, kh, kw, sh, sw, ph, pw)
    cols = np.full(expect.shape, np.nan)
    im2col(cols, x, kh, kw, sh, sw, ph, pw)
    np.testing.assert_array_equal(cols, expect)
    dcols = rng.standard_normal(cols.shape)
    dx = np.full(x.shape, np.nan)
    col2im(dx, dcols, kh, kw, sh, sw, ph, pw)
    assert_adjoint(dcols, cols, dx, x)


def _least(x, dy, per):
    """Workspace elements of one sample group (conv2d_gemm_sample_group): the least a GEMM pass
    takes."""
    return conv2d_gemm_sample_group(x.shape[0], dy.shape[2], dy.shape[3], "cpu") * per


def _workspace_sizes(least, per, n):
    """One group, one group + a little, one group + a sample, the whole batch."""
    return sorted({least, least + 1, least + per, max(least, n * per)})


@pytest.mark.parametrize("shape", SHAPES)
def test_gemm_matches_direct_for_every_workspace(rng, shape):
    x, w, dy, per, s = make_case(rng, shape)
    n = x.shape[0]
    y_ref = np.empty(dy.shape)
    conv2d_forward_direct(y_ref, x, w, *s)
    dx_ref = np.empty(x.shape)
    conv2d_backward_data_direct(dx_ref, dy, w, *s)
    dw_ref = np.empty(w.shape)
    conv2d_backward_filter_direct(dw_ref, dy, x, *s)
    results = []
    for size in _workspace_sizes(_least(x, dy, per), per, n):
        ws = np.full(size, np.nan)
        y = np.full(dy.shape, np.nan)
        dx = np.full(x.shape, np.nan)
        dw = np.full(w.shape, np.nan)
        conv2d_forward_gemm(y, x, w, ws, *s)
        conv2d_backward_data_gemm(dx, dy, w, ws, *s)
        conv2d_backward_filter_gemm(dw, dy, x, ws, *s)
        assert_close64(y, y_ref)
        assert_close64(dx, dx_ref)
        assert_close64(dw, dw_ref)
        results.append((y, dx, dw))
    # the sample groups, not the workspace, cut the batch: the same bits in every workspace
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_gemm_is_deterministic(rng, shape):
    x, w, dy, per, s = make_case(rng, shape)
    n = x.shape[0]
    for size in (_least(x, dy, per), n * per):
        ws = np.empty(size)
        outs = []
        for _ in range(2):
            dw = np.empty(w.shape)
            y = np.empty(dy.shape)
            dx = np.empty(x.shape)
            ws[:] = np.nan
            conv2d_forward_gemm(y, x, w, ws, *s)
            conv2d_backward_data_gemm(dx, dy, w, ws, *s)
            conv2d_backward_filter_gemm(dw, dy, x, ws, *s)
            outs.append((y, dx, dw))
        for a, b in zip(*outs):
            np.testing.assert_array_equal(a, b)


def test_gemm_workspace_too_small(rng):
    shape = SHAPES[0]
    x, w, dy, per, s = make_case(rng, shape)
    least = _least(x, dy, per)
    ws = np.empty(least - 1)
    y = np.empty(dy.shape)
    message = f"a group of {least // per} samples needs {least}"
    with pytest.raises(ValueError, match=message):
        conv2d_forward_gemm(y, x, w, ws, *s)
    with pytest.raises(ValueError, match=message):
        conv2d_backward_data_gemm(np.empty(x.shape), dy, w, ws, *s)
    with pytest.raises(ValueError, match=message):
        conv2d_backward_filter_gemm(np.empty(w.shape), dy, x, ws, *s)


def test_shape_mismatch_raises(rng):
    x, w, dy, per, s = make_case(rng, SHAPES[0])
    with pytest.raises(ValueError, match="do not agree"):
        conv2d_forward_direct(np.empty((2, 4, 3, 3)), x, w, *s)
    with pytest.raises(ValueError, match="C-contiguous"):
        conv2d_forward_gemm(np.empty(dy.shape), x[:, :, :, ::-1], w, np.empty(10 * per), *s)


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_float32(rng, shape):
    x, w, dy, per, s = make_case(rng, shape, np.float32)
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    y_ref = ref_forward(x64, w64, *s)
    dx_ref = ref_backward_data(dy64, w64, x.shape, *s)
    dw_ref = ref_backward_filter(dy64, x64, w.shape, *s)
    tol = dict(rtol=1e-4, atol=1e-4)
    y = np.empty(dy.shape, np.float32)
    dx = np.empty(x.shape, np.float32)
    dw = np.empty(w.shape, np.float32)
    conv2d_forward_direct(y, x, w, *s)
    conv2d_backward_data_direct(dx, dy, w, *s)
    conv2d_backward_filter_direct(dw, dy, x, *s)
    for a, b in ((y, y_ref), (dx, dx_ref), (dw, dw_ref)):
        np.testing.assert_allclose(a, b, **tol)
    ws = np.empty(_least(x, dy, per), np.float32)  # one sample group
    conv2d_forward_gemm(y, x, w, ws, *s)
    conv2d_backward_data_gemm(dx, dy, w, ws, *s)
    conv2d_backward_filter_gemm(dw, dy, x, ws, *s)
    for a, b in ((y, y_ref), (dx, dx_ref), (dw, dw_ref)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, **tol)
    with pytest.raises(TypeError, match="dtype"):
        conv2d_forward_gemm(y, x, w, np.empty(_least(x, dy, per)), *s)


# valid, stride 1, output rows of at least a vector: the direct forward on register tiles
# (n, c, h, w, o, kh, kw)
TILED = [
    (2, 1, 28, 28, 20, 5, 5),  # the SINGA CNN's conv1: 24x24 outputs, 20 filters (8 + 8 + 4)
    (1, 3, 10, 19, 9, 3, 4),  # 8x16 outputs: a float32 vector a row with AVX-512, two float64
    (3, 2, 9, 40, 5, 1, 1),  # 1x1 filters
    (2, 2, 9, 21, 3, 3, 3),  # 19 outputs a row: vectors and a rest one by one
]


@pytest.mark.parametrize("shape", TILED)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_valid_direct_forward_runs_on_tiles(rng, shape, dtype):
    from nnmem.kernels.cpu._valid import valid_forward

    n, c, h, wd, o, kh, kw = shape
    x = rng.standard_normal((n, c, h, wd)).astype(dtype)
    w = rng.standard_normal((o, c, kh, kw)).astype(dtype)
    y = np.full((n, o, h - kh + 1, wd - kw + 1), np.nan, dtype)  # every output written
    assert valid_forward(y, x, w, 1, 1, 0, 0, 1, 1, 1, None, None)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        y, ref_forward(x.astype(np.float64), w.astype(np.float64), 1, 1, 0, 0), **tol
    )
    direct = np.empty_like(y)
    conv2d_forward_direct(direct, x, w, 1, 1, 0, 0)  # the kernel takes that path
    assert np.array_equal(direct, y)


@pytest.mark.parametrize(
    "change",
    ["padding", "stride", "dilation", "narrow rows", "strided output", "float16"],
)
def test_the_tiles_leave_other_direct_forwards_to_the_loops(rng, change):
    """valid_forward declines (False, y untouched) what its layout cannot hold; the loops
    then give the reference's numbers."""
    from nnmem.kernels.cpu._valid import valid_forward

    x = rng.standard_normal((2, 2, 28, 28))
    w = rng.standard_normal((3, 2, 5, 5))
    s, d, oh, ow = (1, 1, 0, 0), (1, 1, 1), 24, 24
    if change == "padding":
        s, oh, ow = (1, 1, 1, 1), 26, 26
    elif change == "stride":
        s, oh, ow = (2, 2, 0, 0), 12, 12
    elif change == "dilation":
        d, oh, ow = (1, 2, 2), 20, 20
    elif change == "narrow rows":
        x = x[:, :, :, :10].copy()
        ow = 6
    elif change == "float16":
        x, w = x.astype(np.float16), w.astype(np.float16)
    y = np.full((2, 3, oh, ow), np.nan, x.dtype)
    if change == "strided output":
        y = np.full((2, 3, oh, 2 * ow), np.nan)[:, :, :, ::2]
    assert not valid_forward(y, x, w, *s, *d, None, None)
    assert np.isnan(y.astype(np.float64)).all()
    if change in ("dilation", "float16"):
        return  # the loops with dilation, and other dtypes, have tests of their own
    conv2d_forward_direct(y, x, w, *s)
    assert_close64(y, ref_forward(x, w, *s))
