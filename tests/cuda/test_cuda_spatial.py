"""The CUDA convolution, pooling, batch-norm and LRN kernels against their CPU twins, with stride
and padding variants, on tiny shapes (the simulator runs every thread as a Python thread). Run
with a GPU or NUMBA_ENABLE_CUDASIM=1 (in a pytest process of its own)."""

import math

import numpy as np
import pytest
from cuda_testutil import RUNS_KERNELS, assert_close, host, needs_device, run_twins, to_device

from nnmem.kernels import cpu, sizes

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]

if RUNS_KERNELS:  # (a Numba without a CUDA target cannot even import them)
    from numba import cuda

    from nnmem.kernels import cuda as gpu


def _randn(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _nan(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


# ---------------------------------------------------------------- convolution
# (x shape, w shape, sh, sw, ph, pw)
CONVS = [
    ((3, 3, 6, 5), (4, 3, 3, 2), 1, 1, 0, 0),
    ((3, 3, 6, 5), (4, 3, 3, 2), 2, 1, 1, 1),
    ((2, 2, 5, 7), (3, 2, 3, 3), 2, 3, 2, 1),  # padding as wide as the kernel allows
    ((2, 3, 4, 4), (2, 3, 1, 1), 1, 1, 0, 0),  # 1 x 1 kernel
]


def _conv_case(rng, case, dtype=np.float32):
    xs, ws, sh, sw, ph, pw = case
    ys = sizes.conv2d_output_shape(xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], sh, sw, ph, pw)
    per = sizes.conv2d_gemm_workspace_per_sample(*xs[1:], ws[0], *ws[2:], sh, sw, ph, pw)
    x, w, dy = _randn(rng, xs, dtype), _randn(rng, ws, dtype), _randn(rng, ys, dtype)
    return x, w, dy, (sh, sw, ph, pw), per


@pytest.mark.parametrize("case", CONVS)
def test_conv2d_direct(rng, case):
    x, w, dy, geometry, _ = _conv_case(rng, case)
    run_twins("conv2d_forward_direct", [_nan(dy.shape), x, w, *geometry], writes=[0])
    run_twins("conv2d_backward_data_direct", [_nan(x.shape), dy, w, *geometry], writes=[0])
    run_twins("conv2d_backward_filter_direct", [_nan(w.shape), dy, x, *geometry], writes=[0])


def _sample_groups(monkeypatch, dy, samples):
    """Sample groups of `samples` samples on both backends: GEMM_GROUP_COLUMNS lowered to that
    many samples' output pixels (these tiny images would make the whole batch one group)."""
    columns = samples * dy.shape[2] * dy.shape[3]
    for backend in ("cpu", "cuda"):
        monkeypatch.setitem(sizes.GEMM_GROUP_COLUMNS, backend, columns)


@pytest.mark.parametrize("case", CONVS[:3])
@pytest.mark.parametrize("samples", [1, 2])  # per group: groups of 1 (B == 1 path), or 2 + 1
def test_conv2d_gemm(rng, monkeypatch, case, samples):
    x, w, dy, geometry, per = _conv_case(rng, case)
    _sample_groups(monkeypatch, dy, samples)
    ws = _nan(samples * per + 3)  # a few spare elements
    run_twins("conv2d_forward_gemm", [_nan(dy.shape), x, w, ws, *geometry], writes=[0])
    run_twins("conv2d_backward_data_gemm", [_nan(x.shape), dy, w, ws, *geometry], writes=[0])
    run_twins("conv2d_backward_filter_gemm", [_nan(w.shape), dy, x, ws, *geometry], writes=[0])


@pytest.mark.parametrize("case", CONVS[:2])
def test_conv2d_gemm_gives_the_same_bits_in_every_workspace(rng, monkeypatch, case):
    """Groups of 2 samples of a batch of 3, in a workspace of one group and in one of the whole
    batch: every pass gives the same bits (backward filter adds the groups in order)."""
    x, w, dy, geometry, per = _conv_case(rng, case)
    _sample_groups(monkeypatch, dy, 2)
    passes = {
        "conv2d_forward_gemm": (dy.shape, x, w),
        "conv2d_backward_data_gemm": (x.shape, dy, w),
        "conv2d_backward_filter_gemm": (w.shape, dy, x),
    }
    for name, (shape, a, b) in passes.items():
        results = []
        for samples in (2, x.shape[0]):
            out = to_device(_nan(shape))
            ws = to_device(_nan(samples * per))
            getattr(gpu, name)(out, to_device(a), to_device(b), ws, *geometry)
            results.append(host(out))
        np.testing.assert_array_equal(results[0], results[1], err_msg=name)


def test_conv2d_float64_and_im2col_col2im(rng):
    x, w, dy, geometry, per = _conv_case(rng, CONVS[1], np.float64)
    run_twins(
        "conv2d_forward_gemm",
        [_nan(dy.shape, np.float64), x, w, _nan(x.shape[0] * per, np.float64), *geometry],
        writes=[0],
        dtype=np.float64,
    )
    run_twins(
        "conv2d_backward_filter_direct",
        [_nan(w.shape, np.float64), dy, x, *geometry],
        writes=[0],
        dtype=np.float64,
    )
    kh, kw = w.shape[2:]
    cols_shape = (x.shape[1] * kh * kw, x.shape[0] * dy.shape[2] * dy.shape[3])
    _, (cols,) = run_twins(
        "im2col", [_nan(cols_shape, np.float64), x, kh, kw, *geometry], writes=[0], exact=True
    )
    # col2im gathers in the CPU's (p, q) order: the same sums, bit for bit
    run_twins("col2im", [_nan(x.shape, np.float64), cols, kh, kw, *geometry], [0], exact=True)


# ---------------------------------------------------------------- pooling
# (kh, kw, sh, sw, ph, pw)
WINDOWS = [
    (2, 2, 2, 2, 0, 0),  # disjoint windows
    (3, 3, 2, 2, 1, 1),  # overlapping, padded
    (3, 2, 1, 2, 1, 0),  # three windows share a row: one input may be chosen three times
]


@pytest.mark.parametrize("window", WINDOWS)
def test_maxpool2d(rng, window):
    x = _randn(rng, (2, 3, 7, 6))
    ys = sizes.pool2d_output_shape(*x.shape, *window)
    argmax = np.full(ys, -1, np.int32)
    _, (y, am) = run_twins("maxpool2d_forward", [_nan(ys), argmax, x, *window], [0, 1], exact=True)
    dy = _randn(rng, ys)
    run_twins("maxpool2d_backward", [_nan(x.shape), dy, am, *window], writes=[0], exact=True)


def test_maxpool2d_ties_go_to_the_first_maximum(rng):
    x = rng.integers(0, 2, (1, 2, 6, 6)).astype(np.float32)  # many equal maxima
    ys = sizes.pool2d_output_shape(*x.shape, 3, 3, 1, 1, 1, 1)
    argmax = np.full(ys, -1, np.int32)
    args = [_nan(ys), argmax, x, 3, 3, 1, 1, 1, 1]
    run_twins("maxpool2d_forward", args, writes=[0, 1], exact=True)


@pytest.mark.parametrize("window", WINDOWS)
def test_avgpool2d(rng, window):
    x = _randn(rng, (2, 3, 7, 6))
    ys = sizes.pool2d_output_shape(*x.shape, *window)
    run_twins("avgpool2d_forward", [_nan(ys), x, *window], writes=[0])
    run_twins("avgpool2d_backward", [_nan(x.shape), _randn(rng, ys), *window], writes=[0])


# ---------------------------------------------------------------- batch normalisation
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((2, 3, 4, 5), np.float32), ((1, 2, 12, 11), np.float32), ((2, 2, 3, 3), np.float64)],
)  # H*W = 132 > 128 threads: every thread sums several elements of a plane
def test_batchnorm2d(rng, shape, dtype):
    c = shape[1]
    x = _randn(rng, shape, dtype) * 2 + 1
    gamma, beta = _randn(rng, c, dtype), _randn(rng, c, dtype)
    running = [_randn(rng, c, dtype), np.abs(_randn(rng, c, dtype)) + 0.5]
    saved = [_nan(c, np.float64), _nan(c, np.float64)]
    args = [_nan(shape, dtype), *saved, *running, x, gamma, beta, 0.9, 1e-5]
    _, (y, mean, invstd, *_) = run_twins("batchnorm2d_forward_train", args, [0, 1, 2, 3, 4], dtype)

    # Apply with the saved statistics rebuilds the training forward's y bit for bit.
    y_apply = to_device(_nan(shape, dtype))
    gpu.batchnorm2d_forward_apply(y_apply, *map(to_device, (x, gamma, beta, mean, invstd)))
    np.testing.assert_array_equal(host(y_apply), y)

    run_twins(
        "batchnorm2d_forward_infer",
        [_nan(shape, dtype), x, gamma, beta, *running, 1e-5],
        writes=[0],
        dtype=dtype,
    )
    dy = _randn(rng, shape, dtype)
    args = [_nan(shape, dtype), _nan(c, dtype), _nan(c, dtype), dy, x, gamma, mean, invstd]
    run_twins("batchnorm2d_backward", args, writes=[0, 1, 2], dtype=dtype)


def test_batchnorm2d_infer_in_place(rng):
    x = _randn(rng, (2, 3, 2, 2))
    vectors = [_randn(rng, 3), _randn(rng, 3), _randn(rng, 3), np.abs(_randn(rng, 3)) + 0.1]
    want = np.empty_like(x)
    cpu.batchnorm2d_forward_infer(want, x, *vectors, 1e-5)
    xd = to_device(x)
    gpu.batchnorm2d_forward_infer(xd, xd, *map(to_device, vectors), 1e-5)
    assert_close(host(xd), want)


# ---------------------------------------------------------------- local response normalisation
@pytest.mark.parametrize("size", [1, 3, 4])  # 4: an even window, mirrored in the backward
def test_lrn(rng, size):
    shape = (2, 5, 3, 4)
    x = _randn(rng, shape)
    _, (y,) = run_twins("lrn_forward", [_nan(shape), x, size, 1e-2, 0.75, 2.0], writes=[0])
    dy = _randn(rng, shape)
    run_twins("lrn_backward", [_nan(shape), dy, x, y, size, 1e-2, 0.75, 2.0], writes=[0])


def _lrn_forward_storing_scale(y, scale, x, size, alpha, beta, k):
    """The CUDA forward as it was when it stored scale for the backward (the reference):
    thread i computes y and scale at element (b, c, s) = i of (N, C, H*W)."""
    i = cuda.grid(1)
    n, c, hw = x.shape
    if i >= n * c * hw:
        return
    s = i % hw
    ci = (i // hw) % c
    b = i // (hw * c)
    before = size // 2
    total = 0.0
    for cc in range(max(ci - before, 0), min(ci - before + size, c)):
        a = x[b, cc, s]
        total += a * a
    d = k + alpha / size * total
    scale[b, ci, s] = d
    y[b, ci, s] = x[b, ci, s] * math.pow(d, -beta)


def _lrn_backward_reading_scale(dx, dy, x, y, scale, size, alpha, beta):
    """The CUDA backward as it was when it read the stored scale (the reference)."""
    i = cuda.grid(1)
    n, c, hw = x.shape
    if i >= n * c * hw:
        return
    s = i % hw
    ci = (i // hw) % c
    b = i // (hw * c)
    after = size // 2
    total = 0.0
    for cc in range(max(ci + after - size + 1, 0), min(ci + after + 1, c)):
        total += dy[b, cc, s] * y[b, cc, s] / scale[b, cc, s]
    coef = 2.0 * alpha * beta / size
    d = scale[b, ci, s]
    dx[b, ci, s] = dy[b, ci, s] * math.pow(d, -beta) - coef * x[b, ci, s] * total


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [3, 4, 5])
def test_lrn_equals_the_kernels_that_stored_scale(rng, dtype, size):
    """The forward no longer stores scale, and the backward takes the window sums again with
    the forward's device function: y and dx must be what the kernels that stored scale computed,
    bit for bit (on a GPU, this also checks that the compiler fused the backward's window sums
    as it fused the forward's, and that each scale is rounded to float32 as the stored one was;
    the simulator cannot check the rounding: with NumPy 2, its float32 arithmetic with Python
    floats stays float32, so its window sums are float32 already)."""
    shape = (2, 7, 3, 4)
    n, c, h, w = shape
    x, dy = (to_device(_randn(rng, shape, dtype) * 2) for _ in range(2))
    y, dx, y_before, scale, dx_before = (to_device(_nan(shape, dtype)) for _ in range(5))
    gpu.lrn_forward(y, x, size, 0.5, 0.75, 1.0)
    gpu.lrn_backward(dx, dy, x, y, size, 0.5, 0.75, 1.0)
    yb, sb, xp, dxb, dyp = (a.reshape(n, c, h * w) for a in (y_before, scale, x, dx_before, dy))
    cuda.jit(_lrn_forward_storing_scale)[1, x.size](yb, sb, xp, size, 0.5, 0.75, 1.0)
    cuda.jit(_lrn_backward_reading_scale)[1, x.size](dxb, dyp, xp, yb, sb, size, 0.5, 0.75)
    assert np.array_equal(host(y), host(y_before))
    assert np.array_equal(host(dx), host(dx_before))
