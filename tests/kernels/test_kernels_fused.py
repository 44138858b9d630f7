"""The fused kernels (kernels/cpu/fused.py) against the unfused kernels they replace, run one
after the other: every output, the saved and running statistics too, bit for bit (compared as
unsigned integers, so that NaN, -0.0 and the last bit all count), in place where the fusion
pass runs them in place, serial and parallel, on one thread and on all."""

import numba
import numpy as np
import pytest

from nnmem.kernels import cpu as K

MOMENTUM, EPS = 0.9, 1e-5
DTYPES = [np.float32, np.float64]
# W = 5, 8, 6: rows with 1, 0 and 2 values past the last group of four (the sums' chains)
SHAPES = [(2, 3, 4, 5), (3, 2, 3, 8), (2, 3, 2, 6)]
CASES = [(d, s) for d in DTYPES for s in SHAPES]
BIG = (2, 3, 211, 211)  # past _jit.PARALLEL_FROM (2**18): by_size kernels run in parallel
BIG_ROWS = (1025, 256)


def assert_same_bits(got, want):
    uint = {4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(uint), want.view(uint))


def assert_all_same_bits(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same_bits(g, w)


def _signed(rng, shape, dtype):
    """Normal values, about a quarter of them exact zeros and a tenth -0.0."""
    a = rng.standard_normal(shape).astype(dtype)
    a[rng.random(shape) < 0.25] = 0
    a[rng.random(shape) < 0.1] = -0.0
    return a


def _bn_inputs(rng, shape, dtype):
    """x (a large mean: the two-pass variance), gamma of both signs, beta, r, running stats."""
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)
    gamma = rng.uniform(-1.5, 1.5, c).astype(dtype)
    beta = rng.standard_normal(c).astype(dtype)
    r = _signed(rng, shape, dtype)
    # channel 0 constant: x - mean = +0.0, times gamma < 0 is -0.0, plus beta = -0.0 is -0.0,
    # the BN output, which the ReLU keeps (as -0.0 + r where r = -0.0)
    x[:, 0], gamma[0], beta[0] = 5, -1, -0.0
    running = rng.standard_normal(c).astype(dtype), rng.uniform(0.5, 2, c).astype(dtype)
    return x, gamma, beta, r, running


def _flat(a):
    return a.reshape(-1)


def _chain_forward_train(x, gamma, beta, r, running):
    """BN train; [s = y + r]; z = relu: z, saved mean, saved invstd, running mean, var."""
    c = x.shape[1]
    y, mean, invstd = np.empty_like(x), np.empty(c), np.empty(c)
    rm, rv = running[0].copy(), running[1].copy()
    K.batchnorm2d_forward_train(y, mean, invstd, rm, rv, x, gamma, beta, MOMENTUM, EPS)
    if r is not None:
        s = np.empty_like(x)
        K.add(_flat(s), _flat(y), _flat(r))
        y = s
    z = np.empty_like(x)
    K.relu_forward(_flat(z), _flat(y))
    return z, mean, invstd, rm, rv


def _fused_forward_train(x, gamma, beta, r, running):
    c = x.shape[1]
    z, mean, invstd = np.full_like(x, np.nan), np.full(c, np.nan), np.full(c, np.nan)
    rm, rv = running[0].copy(), running[1].copy()
    if r is None:
        K.batchnorm2d_relu_forward_train(z, mean, invstd, rm, rv, x, gamma, beta, MOMENTUM, EPS)
    else:
        K.batchnorm2d_add_relu_forward_train(
            z, mean, invstd, rm, rv, x, gamma, beta, r, MOMENTUM, EPS
        )
    return z, mean, invstd, rm, rv


@pytest.mark.parametrize("residual", [False, True], ids=["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("dtype, shape", CASES)
def test_forward_train_and_apply(rng, dtype, shape, residual):
    x, gamma, beta, r, running = _bn_inputs(rng, shape, dtype)
    x[1, 1, 0, 0] = np.nan  # a NaN makes its channel NaN: it must pass the ReLU
    r = r if residual else None
    want = _chain_forward_train(x, gamma, beta, r, running)
    got = _fused_forward_train(x, gamma, beta, r, running)
    assert_all_same_bits(got, want)
    assert 0 < np.count_nonzero(want[0] == 0) < want[0].size  # the mask mattered
    # apply: BN apply from the saved statistics; [add]; ReLU (recomputation's rebuild)
    mean, invstd = want[1], want[2]
    y, z = np.empty_like(x), np.full_like(x, np.nan)
    K.batchnorm2d_forward_apply(y, x, gamma, beta, mean, invstd)
    if residual:
        K.add(_flat(y), _flat(y), _flat(r))
        K.batchnorm2d_add_relu_forward_apply(z, x, gamma, beta, r, mean, invstd)
    else:
        K.batchnorm2d_relu_forward_apply(z, x, gamma, beta, mean, invstd)
    K.relu_forward(_flat(y), _flat(y))
    assert_same_bits(z, y)
    if not numba.config.DISABLE_JIT:  # uncompiled, NumPy rounds train's scale to float32
        assert_same_bits(z, want[0])  # with float64 statistics, the training forward's z


def _backward_inputs(rng, shape, dtype):
    """x, gamma, saved statistics, z (a ReLU's output: zeros and positives, one NaN) and dz
    (zeros, -0.0, one NaN where z > 0)."""
    x, gamma, beta, r, running = _bn_inputs(rng, shape, dtype)
    z, mean, invstd, _, _ = _chain_forward_train(x, gamma, beta, r, running)
    z[0, 0, 0, 0] = np.nan  # NaN > 0 is false: dy = 0 there
    dz = _signed(rng, shape, dtype)
    z[1, 0, 0, 0], dz[1, 0, 0, 0] = 1, np.nan  # a NaN gradient where z > 0 passes
    return x, gamma, mean, invstd, z, dz


def _chain_backward(x, gamma, mean, invstd, z, dz):
    """dy = relu_backward(dz, z); BN backward: dx, dgamma, dbeta, dy."""
    c = x.shape[1]
    dy, dx = np.empty_like(x), np.empty_like(x)
    dgamma, dbeta = np.empty(c, x.dtype), np.empty(c, x.dtype)
    K.relu_backward(_flat(dy), _flat(dz), _flat(z))
    K.batchnorm2d_backward(dx, dgamma, dbeta, dy, x, gamma, mean, invstd)
    return dx, dgamma, dbeta, dy


def _outputs(x):
    c = x.shape[1]
    return np.full_like(x, np.nan), np.full(c, np.nan, x.dtype), np.full(c, np.nan, x.dtype)


@pytest.mark.parametrize("dtype, shape", CASES)
def test_backward(rng, dtype, shape):
    x, gamma, mean, invstd, z, dz = _backward_inputs(rng, shape, dtype)
    want = _chain_backward(x, gamma, mean, invstd, z, dz)
    dx, dgamma, dbeta = _outputs(x)
    K.batchnorm2d_relu_backward(dx, dgamma, dbeta, dz, z, x, gamma, mean, invstd)
    assert_all_same_bits((dx, dgamma, dbeta), want[:3])
    # + Add: ds written too, into its own array or over dz (the fusion pass's in-place plan)
    dx, dgamma, dbeta = _outputs(x)
    ds = np.full_like(x, np.nan)
    K.batchnorm2d_add_relu_backward(dx, dgamma, dbeta, ds, dz, z, x, gamma, mean, invstd)
    assert_all_same_bits((dx, dgamma, dbeta, ds), want)
    dx, dgamma, dbeta = _outputs(x)
    ds = dz.copy()
    K.batchnorm2d_add_relu_backward(dx, dgamma, dbeta, ds, ds, z, x, gamma, mean, invstd)
    assert_all_same_bits((dx, dgamma, dbeta, ds), want)


def _bias_inputs(rng, shape, dtype):
    y = _signed(rng, shape, dtype)
    y.reshape(-1)[:2] = np.nan, -0.0
    b = rng.standard_normal(shape[1]).astype(dtype)
    b[:2] = 0, -0.0  # -0.0 + 0 is +0.0; -0.0 + -0.0 is -0.0, which the ReLU keeps
    return y, b, _signed(rng, shape, dtype)


def _check_bias_nchw(y, b, dz):
    want_z = y.copy()
    K.add_bias_nchw(want_z, b)
    K.relu_forward(_flat(want_z), _flat(want_z))
    got_z = y.copy()
    K.add_bias_relu_nchw(got_z, b)
    assert_same_bits(got_z, want_z)
    want_dy, want_db = np.empty_like(y), np.empty(y.shape[1], y.dtype)
    K.relu_backward(_flat(want_dy), _flat(dz), _flat(want_z))
    K.bias_grad_nchw(want_db, want_dy)
    dy, db = np.full_like(y, np.nan), np.full_like(want_db, np.nan)
    K.relu_backward_bias_grad_nchw(dy, db, dz, want_z)
    assert_all_same_bits((dy, db), (want_dy, want_db))
    dy = dz.copy()
    K.relu_backward_bias_grad_nchw(dy, db, dy, want_z)  # in place
    assert_all_same_bits((dy, db), (want_dy, want_db))


def _check_bias_rows(x, b, dz):
    want_z = np.empty_like(x)
    K.copy(_flat(want_z), _flat(x))
    K.add_bias_rows(want_z, b)
    K.relu_forward(_flat(want_z), _flat(want_z))
    got_z = np.full_like(x, np.nan)
    K.add_bias_rows_relu(got_z, x, b)
    assert_same_bits(got_z, want_z)
    got_z = x.copy()
    K.add_bias_rows_relu(got_z, got_z, b)  # in place
    assert_same_bits(got_z, want_z)
    want_dy, want_db = np.empty_like(x), np.empty(x.shape[1], x.dtype)
    K.relu_backward(_flat(want_dy), _flat(dz), _flat(want_z))
    K.sum_rows(want_db, want_dy)
    dy, db = np.full_like(x, np.nan), np.full_like(want_db, np.nan)
    K.relu_backward_sum_rows(dy, db, dz, want_z)
    assert_all_same_bits((dy, db), (want_dy, want_db))
    dy = dz.copy()
    K.relu_backward_sum_rows(dy, db, dy, want_z)  # in place
    assert_all_same_bits((dy, db), (want_dy, want_db))


@pytest.mark.parametrize("dtype, shape", CASES)
def test_bias_relu(rng, dtype, shape):
    _check_bias_nchw(*_bias_inputs(rng, shape, dtype))
    _check_bias_rows(*_bias_inputs(rng, (shape[0] * shape[2], shape[1] * shape[3]), dtype))


def test_bias_relu_parallel(rng):
    """Past PARALLEL_FROM the by_size kernels run in parallel: still the chain's bits."""
    y, b, dz = _bias_inputs(rng, BIG, np.float32)
    for kernel, args in [
        (K.add_bias_relu_nchw, (y, b)),
        (K.relu_backward_bias_grad_nchw, (y, b, dz, y)),
    ]:
        assert kernel.pick(*args) is kernel.parallel
    _check_bias_nchw(y, b, dz)
    x, b, dz = _bias_inputs(rng, BIG_ROWS, np.float32)
    assert K.add_bias_rows_relu.pick(x, x, b) is K.add_bias_rows_relu.parallel
    _check_bias_rows(x, b, dz)


def test_results_do_not_depend_on_the_thread_count(rng):
    x, gamma, mean, invstd, z, dz = _backward_inputs(rng, (4, 5, 6, 8), np.float32)
    beta, r = gamma[::-1].copy(), dz[::-1].copy()
    caller, runs = numba.get_num_threads(), []
    try:
        for threads in sorted({1, caller}):
            numba.set_num_threads(threads)
            out = _fused_forward_train(x, gamma, beta, r, (mean.copy(), invstd.copy()))
            dx, dgamma, dbeta = _outputs(x)
            K.batchnorm2d_relu_backward(dx, dgamma, dbeta, dz, z, x, gamma, mean, invstd)
            runs.append(out + (dx, dgamma, dbeta))
    finally:
        numba.set_num_threads(caller)
    assert_all_same_bits(runs[0], runs[-1])


def test_bad_shapes_raise(rng):
    x, gamma, mean, invstd, z, dz = _backward_inputs(rng, SHAPES[0], np.float32)
    dx, dgamma, dbeta = _outputs(x)
    short = gamma[:-1]
    with pytest.raises(ValueError, match="per-channel vectors must have length C"):
        K.batchnorm2d_relu_forward_train(z, mean, invstd, mean, invstd, x, short, gamma, 0.9, EPS)
    with pytest.raises(ValueError, match="y must match x"):
        K.batchnorm2d_add_relu_forward_train(
            z, mean, invstd, mean, invstd, x, gamma, gamma, x[:1], 0.9, EPS
        )
    with pytest.raises(ValueError, match="y must match x"):
        K.batchnorm2d_add_relu_forward_apply(z, x, gamma, gamma, x[:1], mean, invstd)
    with pytest.raises(ValueError, match="y must match x"):
        K.batchnorm2d_relu_backward(dx, dgamma, dbeta, dz[:1], z, x, gamma, mean, invstd)
    with pytest.raises(ValueError, match="y must match x"):
        K.batchnorm2d_add_relu_backward(dx, dgamma, dbeta, dz[:1], dz, z, x, gamma, mean, invstd)
    with pytest.raises(ValueError, match=r"y.shape\[1\] must equal b.shape\[0\]"):
        K.add_bias_relu_nchw(z, short)
    with pytest.raises(ValueError, match="db"):
        K.relu_backward_bias_grad_nchw(dx, short, dz, z)
    rows = x.reshape(x.shape[0], -1)
    with pytest.raises(ValueError, match="b"):
        K.add_bias_rows_relu(rows, rows, rows[0, :-1])
    with pytest.raises(ValueError, match="one"):
        K.relu_backward_sum_rows(rows, rows[0], rows[:1], rows)
