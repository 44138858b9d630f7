"""The CUDA fused kernels against the chains of CUDA kernels they replace, bit for bit: the same
inputs go through the chain (one kernel after the other, the intermediates in arrays of their
own) and through the fused kernel, and every output's raw bits must match, -0.0 and NaN
included. Tiny shapes (the simulator runs each thread as a Python thread). Run with a GPU or
NUMBA_ENABLE_CUDASIM=1 (in a pytest process of its own)."""

import numpy as np
import pytest
from cuda_testutil import RUNS_KERNELS, host, needs_device, to_device

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]

if RUNS_KERNELS:  # (a Numba without a CUDA target cannot even import them)
    from nnmem.kernels import cuda as gpu

FLOATS = [np.float32, np.float64]
NCHW = (2, 2, 3, 5)  # 15 elements per plane, 2 channels: 2 blocks of the BN and bias kernels
ROWS = (9, 33)  # more rows than sum_rows splits 8 ways, more columns than one 32-column block
#: (dtype, in place) of the masked sums: a block per output costs the simulator a second
MASKED_SUMS = [(np.float32, False), (np.float32, True), (np.float64, True)]


def _bits(a):
    """The raw bits of a host array: equal bits, not equal values (-0.0 != 0.0, NaN == NaN)."""
    return a.view(f"u{a.dtype.itemsize}")


def assert_same_bits(got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        np.testing.assert_array_equal(_bits(g), _bits(w), err_msg=f"output {i}")


def _dev(*arrays):
    return [to_device(a) for a in arrays]


def _nan(shape, dtype):
    return np.full(shape, np.nan, dtype)


def _signed(rng, shape, dtype, nan=True):
    """Normal values with exact zeros, -0.0 and (at flat index 5) a NaN among them: the ReLU's
    edge cases. A gradient dz and a ReLU output z made so have their NaN at the same place,
    where z's NaN masks dz's (NaN > 0 is false)."""
    a = rng.standard_normal(shape).astype(dtype)
    flat = a.reshape(-1)
    flat[::7] = 0.0
    flat[3::7] = -0.0
    if nan:
        flat[5] = np.nan
    return a


@pytest.fixture
def bn(rng, request):
    """Host arrays of one BatchNorm: x, gamma, beta, running mean and variance, a residual r, a
    gradient dz, in `request.param`'s dtype, and x's statistics (float64 mean and invstd)."""
    dtype = request.param
    c = NCHW[1]
    x = (rng.standard_normal(NCHW) * 2 + 1).astype(dtype)
    gamma, beta = rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)
    running = [rng.standard_normal(c).astype(dtype), np.abs(rng.standard_normal(c)).astype(dtype)]
    r = rng.standard_normal(NCHW).astype(dtype)
    axes = (0, 2, 3)
    saved = [x.mean(axes, dtype=np.float64), 1 / np.sqrt(x.var(axes, dtype=np.float64) + 1e-5)]
    dz = _signed(rng, NCHW, dtype, nan=False)
    return dict(x=x, gamma=gamma, beta=beta, running=running, r=r, dz=dz, saved=saved)


def _train_outputs(dtype):
    c = NCHW[1]
    return _dev(_nan(NCHW, dtype), _nan(c, np.float64), _nan(c, np.float64))


@pytest.mark.parametrize(
    ("residual", "bn"),
    [(False, np.float32), (True, np.float32), (True, np.float64)],
    indirect=["bn"],
)
def test_batchnorm_relu_forward_train_and_apply(bn, residual):
    dtype = bn["x"].dtype
    x, gamma, beta, r = _dev(bn["x"], bn["gamma"], bn["beta"], bn["r"])
    # the chain: BN into y, (s = y + r,) ReLU into z; then the apply forward's chain
    y, mean, invstd = _train_outputs(dtype)
    running = _dev(*bn["running"])
    gpu.batchnorm2d_forward_train(y, mean, invstd, *running, x, gamma, beta, 0.9, 1e-5)
    if residual:
        gpu.add(y.reshape(-1), y.reshape(-1), r.reshape(-1))
    z = to_device(_nan(NCHW, dtype))
    gpu.relu_forward(z.reshape(-1), y.reshape(-1))
    want = [host(a) for a in (z, mean, invstd, *running)]
    y_apply = to_device(_nan(NCHW, dtype))
    gpu.batchnorm2d_forward_apply(y_apply, x, gamma, beta, mean, invstd)
    if residual:
        gpu.add(y_apply.reshape(-1), y_apply.reshape(-1), r.reshape(-1))
    gpu.relu_forward(y_apply.reshape(-1), y_apply.reshape(-1))

    fz, fmean, finvstd = _train_outputs(dtype)
    frunning = _dev(*bn["running"])
    if residual:
        args = (fz, fmean, finvstd, *frunning, x, gamma, beta, r, 0.9, 1e-5)
        gpu.batchnorm2d_add_relu_forward_train(*args)
    else:
        gpu.batchnorm2d_relu_forward_train(fz, fmean, finvstd, *frunning, x, gamma, beta, 0.9, 1e-5)
    assert_same_bits([host(a) for a in (fz, fmean, finvstd, *frunning)], want)

    z_apply = to_device(_nan(NCHW, dtype))
    if residual:
        gpu.batchnorm2d_add_relu_forward_apply(z_apply, x, gamma, beta, r, mean, invstd)
    else:
        gpu.batchnorm2d_relu_forward_apply(z_apply, x, gamma, beta, mean, invstd)
    assert_same_bits([host(z_apply)], [host(y_apply)])


@pytest.mark.parametrize("residual", [False, True])
def test_relu_clips_the_bn_output_rounded_to_its_dtype(residual):
    """(x - mean) * scale + shift = -2^-52 * 1e-300 is below 0 in float64 but -0.0 once stored in
    float32, as the chain stores y. The simulator's ReLU keeps that -0.0, where a clip of the
    float64 value gives +0.0 (on a GPU both give +0.0: NVVM clips -0.0 too)."""
    x = np.ones((1, 1, 1, 2), np.float32)
    vectors = _dev(np.ones(1, np.float32), np.array([-0.0], np.float32))
    saved = _dev(np.array([1 + 2.0**-52]), np.array([1e-300]))
    xd, r = _dev(x, np.array([-0.0, 1.0], np.float32).reshape(x.shape))
    y = to_device(_nan(x.shape, np.float32))
    gpu.batchnorm2d_forward_apply(y, xd, *vectors, *saved)
    assert _bits(host(y))[0, 0, 0, 0] == _bits(np.float32(-0.0))  # the case this test is about
    if residual:
        gpu.add(y.reshape(-1), y.reshape(-1), r.reshape(-1))
    gpu.relu_forward(y.reshape(-1), y.reshape(-1))
    z = to_device(_nan(x.shape, np.float32))
    if residual:
        gpu.batchnorm2d_add_relu_forward_apply(z, xd, *vectors, r, *saved)
    else:
        gpu.batchnorm2d_relu_forward_apply(z, xd, *vectors, *saved)
    assert_same_bits([host(z)], [host(y)])


@pytest.mark.parametrize(
    ("form", "bn"),
    [
        ("relu", np.float32),
        ("relu", np.float64),
        ("add_relu", np.float32),
        ("add_relu_in_place", np.float64),
    ],
    indirect=["bn"],
)
def test_batchnorm_relu_backward(bn, form):
    dtype = bn["x"].dtype
    c = NCHW[1]
    x, gamma, beta, r, mean, invstd = _dev(bn["x"], bn["gamma"], bn["beta"], bn["r"], *bn["saved"])
    # z, the forward's output the mask reads (made by the chain: one thread per element)
    z = to_device(_nan(NCHW, dtype))
    gpu.batchnorm2d_forward_apply(z, x, gamma, beta, mean, invstd)
    if form != "relu":
        gpu.add(z.reshape(-1), z.reshape(-1), r.reshape(-1))
    gpu.relu_forward(z.reshape(-1), z.reshape(-1))

    def outputs():
        return _dev(_nan(NCHW, dtype), _nan(c, dtype), _nan(c, dtype))

    # a NaN gradient where z is 0: masked, it must not reach the sums
    dz = bn["dz"].copy()
    dz.reshape(-1)[np.flatnonzero(host(z).reshape(-1) == 0)[0]] = np.nan
    # the chain: dy = relu_backward(dz, z) in an array of its own, then the BN backward
    dy = to_device(_nan(NCHW, dtype))
    gpu.relu_backward(dy.reshape(-1), to_device(dz).reshape(-1), z.reshape(-1))
    dx, dgamma, dbeta = outputs()
    gpu.batchnorm2d_backward(dx, dgamma, dbeta, dy, x, gamma, mean, invstd)
    want = [host(a) for a in (dx, dgamma, dbeta)]

    fdx, fdgamma, fdbeta = outputs()
    fdz = to_device(dz)
    if form == "relu":
        gpu.batchnorm2d_relu_backward(fdx, fdgamma, fdbeta, fdz, z, x, gamma, mean, invstd)
        got = [fdx, fdgamma, fdbeta, fdz]
        want.append(dz)  # dz is read, never written
    else:
        ds = fdz if form == "add_relu_in_place" else to_device(_nan(NCHW, dtype))
        gpu.batchnorm2d_add_relu_backward(fdx, fdgamma, fdbeta, ds, fdz, z, x, gamma, mean, invstd)
        got = [fdx, fdgamma, fdbeta, ds]
        want.append(host(dy))
    assert_same_bits([host(a) for a in got], want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_add_bias_relu_nchw(rng, dtype):
    y, b = _signed(rng, NCHW, dtype), rng.standard_normal(NCHW[1]).astype(dtype)
    b[0] = -0.0  # y = -0.0 + -0.0 stays -0.0 through the ReLU
    chain, fused, bd = _dev(y, y, b)
    gpu.add_bias_nchw(chain, bd)
    gpu.relu_forward(chain.reshape(-1), chain.reshape(-1))
    gpu.add_bias_relu_nchw(fused, bd)
    assert_same_bits([host(fused)], [host(chain)])


@pytest.mark.parametrize(("dtype", "in_place"), MASKED_SUMS)
def test_relu_backward_bias_grad_nchw(rng, dtype, in_place):
    dz, z = _signed(rng, NCHW, dtype), _signed(rng, NCHW, dtype)
    dy, db = _dev(_nan(NCHW, dtype), _nan(NCHW[1], dtype))
    dzd, zd = _dev(dz, z)
    gpu.relu_backward(dy.reshape(-1), dzd.reshape(-1), zd.reshape(-1))
    gpu.bias_grad_nchw(db, dy)
    fdz = to_device(dz)
    fdy = fdz if in_place else to_device(_nan(NCHW, dtype))
    fdb = to_device(_nan(NCHW[1], dtype))
    gpu.relu_backward_bias_grad_nchw(fdy, fdb, fdz, zd)
    assert_same_bits([host(fdy), host(fdb)], [host(dy), host(db)])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("in_place", [False, True])
def test_add_bias_rows_relu(rng, dtype, in_place):
    x, b = _signed(rng, ROWS, dtype), rng.standard_normal(ROWS[1]).astype(dtype)
    b[0] = -0.0
    y, xd, bd = _dev(_nan(ROWS, dtype), x, b)
    gpu.copy(y.reshape(-1), xd.reshape(-1))
    gpu.add_bias_rows(y, bd)
    gpu.relu_forward(y.reshape(-1), y.reshape(-1))
    z = xd if in_place else to_device(_nan(ROWS, dtype))
    gpu.add_bias_rows_relu(z, xd, bd)
    assert_same_bits([host(z)], [host(y)])


@pytest.mark.parametrize(("dtype", "in_place"), MASKED_SUMS)
def test_relu_backward_sum_rows(rng, dtype, in_place):
    dz, z = _signed(rng, ROWS, dtype), _signed(rng, ROWS, dtype)
    dy, db = _dev(_nan(ROWS, dtype), _nan(ROWS[1], dtype))
    dzd, zd = _dev(dz, z)
    gpu.relu_backward(dy.reshape(-1), dzd.reshape(-1), zd.reshape(-1))
    gpu.sum_rows(db, dy)
    fdz = to_device(dz)
    fdy = fdz if in_place else to_device(_nan(ROWS, dtype))
    fdb = to_device(_nan(ROWS[1], dtype))
    gpu.relu_backward_sum_rows(fdy, fdb, fdz, zd)
    assert_same_bits([host(fdy), host(fdb)], [host(dy), host(db)])


def test_bad_input_is_refused_in_one_line():
    """Shapes and dtypes are checked on the host, before any launch, with the CPU's error
    types; a host array is refused (it would be copied at every launch)."""
    a, v = _dev(np.zeros((2, 3, 1, 1), np.float32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="add_bias_relu_nchw: y.shape"):
        gpu.add_bias_relu_nchw(a, v)
    with pytest.raises(TypeError, match="relu_backward_sum_rows: .* has dtype float64"):
        m = to_device(np.zeros((2, 3), np.float32))
        gpu.relu_backward_sum_rows(m, to_device(np.zeros(3)), m, m)
    with pytest.raises(TypeError, match="not a CUDA device array"):
        gpu.add_bias_rows_relu(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32), v)
    with pytest.raises(ValueError, match="batchnorm2d_relu_forward_apply: "):
        gpu.batchnorm2d_relu_forward_apply(a, a, v, v, *_dev(np.zeros(4), np.zeros(4)))
