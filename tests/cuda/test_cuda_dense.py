"""The CUDA elementwise, concatenation, reduction, GEMM, loss and optimiser kernels against their
CPU twins, on tiny shapes around the block and tile sizes (the simulator runs every thread as a
Python thread). Run with a GPU or NUMBA_ENABLE_CUDASIM=1 (in a pytest process of its own)."""

import math
import pathlib
import sys

import numpy as np
import pytest
from cuda_testutil import (
    RUNS_KERNELS,
    assert_close,
    empty_like,
    host,
    needs_device,
    run_twins,
    to_device,
)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from training import train_on_gradients  # noqa: E402

from nnmem import device, opt  # noqa: E402
from nnmem.kernels import counter_rng  # noqa: E402

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]

if RUNS_KERNELS:  # (a Numba without a CUDA target cannot even import them)
    from nnmem.kernels import cuda as gpu

SIZES = [1, 257]  # one element; one more than a 256-thread block
FLOATS = [np.float32, np.float64]


def _randn(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------- elementwise
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_and_binary(rng, n, dtype):
    x, a, b = (_randn(rng, n, dtype) for _ in range(3))
    x[0] = 0.0
    out = np.full(n, np.nan, dtype)
    for name in ("relu_forward", "sigmoid_forward"):
        run_twins(name, [out, x], writes=[0], dtype=dtype)
    for name in ("relu_backward", "sigmoid_backward", "add", "sub", "mul", "dropout_backward"):
        run_twins(name, [out, a, b], writes=[0], dtype=dtype)
    run_twins("axpy", [a, -0.5, b], writes=[0], dtype=dtype)
    run_twins("scale", [a, 3.0], writes=[0], dtype=dtype)
    run_twins("fill", [out, 2.5], writes=[0], dtype=dtype)
    run_twins("copy", [out, x], writes=[0], dtype=dtype)


def test_sigmoid_of_large_inputs_does_not_overflow():
    x = np.array([-1000.0, -30.0, 0.0, 30.0, 1000.0], np.float32)
    y = to_device(x)
    gpu.sigmoid_forward(y, y)  # in place
    np.testing.assert_allclose(host(y), [0.0, 1 / (1 + math.exp(30)), 0.5, 1.0, 1.0], atol=1e-7)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_fill_and_copy_integers(dtype):
    y = to_device(np.zeros(5, dtype))
    gpu.fill(y, 2**31 - 1 if dtype == np.int32 else 2**40 + 1)
    assert host(y).tolist() == [2**31 - 1 if dtype == np.int32 else 2**40 + 1] * 5
    x = np.arange(5, dtype=dtype)
    gpu.copy(y, to_device(x))
    np.testing.assert_array_equal(host(y), x)


def test_bias(rng):
    for shape in [(1, 1), (3, 37)]:
        run_twins("add_bias_rows", [_randn(rng, shape), _randn(rng, shape[1])], writes=[0])
    for shape in [(1, 1, 1, 1), (2, 3, 5, 4)]:
        run_twins("add_bias_nchw", [_randn(rng, shape), _randn(rng, shape[1])], writes=[0])


# ---------------------------------------------------------------- dropout and counters
# The generator's arithmetic wraps modulo 2**64 on purpose; NumPy (the simulator's kernels, and
# the reference below) warns when uint64 scalars wrap.
wrapping_is_intended = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def _reference_mask(seed, draw, n, ratio, dtype):
    """The mask from the generator's Python source (NumPy arithmetic on uint64 arrays)."""
    u = counter_rng.counter_uniform(np.uint64(seed), np.uint64(draw), np.arange(n, dtype=np.uint64))
    return np.where(u < ratio, 0.0, 1.0 / (1.0 - ratio)).astype(dtype)


@wrapping_is_intended
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("n", "ratio", "seed"), [(1, 0.5, 0), (300, 0.3, 2**62 + 12345)])
def test_dropout_forward_matches_the_cpu_bit_for_bit(rng, dtype, n, ratio, seed):
    x = _randn(rng, n, dtype)
    nan = np.full(n, np.nan, dtype)
    args = [nan, nan, np.array([41], np.int64), x, ratio, seed]
    _, (y, mask, state) = run_twins("dropout_forward", args, writes=[0, 1, 2], exact=True)
    assert state.tolist() == [42]
    np.testing.assert_array_equal(mask, _reference_mask(seed, 41, n, ratio, dtype))
    np.testing.assert_array_equal(y, x * mask)


@wrapping_is_intended
def test_dropout_takes_any_64_bit_seed(rng):
    n, seed = 40, 2**64 - 1
    x = _randn(rng, n)
    y, mask, state = empty_like(x), empty_like(x), to_device(np.array([3], np.int64))
    gpu.dropout_forward(y, mask, state, to_device(x), 0.25, seed)
    np.testing.assert_array_equal(host(mask), _reference_mask(seed, 3, n, 0.25, np.float32))
    with pytest.raises(ValueError, match="seed"):
        gpu.dropout_forward(y, mask, state, to_device(x), 0.25, 2**64)


@wrapping_is_intended
def test_dropout_draws_a_new_mask_each_call_and_works_in_place(rng):
    x = to_device(np.ones(64, np.float32))
    mask = empty_like(np.ones(64, np.float32))
    state = to_device(np.zeros(1, np.int64))
    gpu.dropout_forward(x, mask, state, x, 0.5, 7)  # y is x
    first = host(mask)
    gpu.dropout_forward(x, mask, state, x, 0.5, 7)
    assert host(state).tolist() == [2]
    assert not np.array_equal(first, host(mask))
    np.testing.assert_array_equal(host(x), first * host(mask))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_increment(dtype):
    counter = to_device(np.array([5], dtype))
    gpu.increment(counter)
    gpu.increment(counter)
    assert host(counter).tolist() == [7]


# ---------------------------------------------------------------- concatenation
def test_concat_copy_in_and_out(rng):
    y = np.full((3, 10), np.nan, np.float32)
    x = _randn(rng, (3, 4))
    _, (got,) = run_twins("concat_copy_in", [y, x, 5], writes=[0], exact=True)
    assert np.isnan(got[:, :5]).all() and np.isnan(got[:, 9]).all()  # the rest untouched
    dy = _randn(rng, (3, 10))
    run_twins("concat_copy_out", [np.full((3, 4), np.nan, np.float32), dy, 6], writes=[0])
    with pytest.raises(ValueError):
        gpu.concat_copy_in(to_device(y), to_device(x), 7)


# ---------------------------------------------------------------- reductions
@pytest.mark.parametrize("shape", [(1, 1), (17, 5), (3, 33)])  # rows > 8 split; 2 column blocks
def test_sum_rows(rng, shape):
    run_twins("sum_rows", [np.full(shape[1], np.nan, np.float32), _randn(rng, shape)], writes=[0])


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 2, 12, 11)])  # H*W below / above 128
def test_bias_grad_nchw(rng, shape):
    db = np.full(shape[1], np.nan, np.float32)
    run_twins("bias_grad_nchw", [db, _randn(rng, shape)], writes=[0])


# ---------------------------------------------------------------- GEMM
def _stored(a, trans):
    return np.ascontiguousarray(a.T) if trans else a


@pytest.mark.parametrize(
    ("m", "k", "n", "trans_a", "trans_b", "dtype"),
    [
        (3, 5, 4, False, False, np.float32),  # smaller than one 16 x 16 tile
        (3, 5, 4, True, False, np.float32),
        (3, 5, 4, False, True, np.float32),
        (3, 5, 4, True, True, np.float64),
        (17, 33, 18, False, False, np.float32),  # 2 x 2 tiles, 3 steps along K, ragged edges
        (17, 33, 18, True, True, np.float32),
        (2, 0, 3, False, False, np.float32),  # K = 0: out = 0
        (3, 4100, 2, False, True, np.float32),  # few tiles, long K: one block per element
        (2, 4096, 3, True, False, np.float64),
    ],
)
def test_matmul(rng, m, k, n, trans_a, trans_b, dtype):
    a, b = _randn(rng, (m, k), dtype), _randn(rng, (k, n), dtype)
    args = [np.full((m, n), np.nan, dtype), _stored(a, trans_a), _stored(b, trans_b)]
    _, (got,) = run_twins("matmul", args + [trans_a, trans_b], writes=[0], dtype=dtype)
    assert_close(got, a @ b, dtype)


def test_matmul_reads_a_transposed_view_in_place(rng):
    a, b = _randn(rng, (4, 6)), _randn(rng, (4, 5))
    out = empty_like(np.zeros((6, 5), np.float32))
    gpu.matmul(out, to_device(a).T, to_device(b))  # an F-contiguous view: no copy is made
    assert_close(host(out), a.T @ b)


# ---------------------------------------------------------------- losses
@pytest.mark.parametrize(
    ("n", "c", "ltype"), [(1, 1, np.int32), (5, 7, np.int32), (130, 3, np.int64)]
)
def test_softmax_cross_entropy(rng, n, c, ltype):
    x = _randn(rng, (n, c)) * 3
    labels = rng.integers(0, c, n).astype(ltype)
    nan = np.full((n, c), np.nan, np.float32)
    loss = np.full(1, np.nan, np.float32)
    (_, prob), _ = run_twins("softmax_cross_entropy_forward", [loss, nan, x, labels], writes=[0, 1])
    dloss = np.array([0.7], np.float32)
    run_twins("softmax_cross_entropy_backward", [nan, dloss, prob, labels], writes=[0])


def test_bad_labels_give_nan_instead_of_raising(rng):
    x = to_device(_randn(rng, (3, 4)))
    prob, loss, dx = (empty_like(np.zeros(s, np.float32)) for s in [(3, 4), 1, (3, 4)])
    labels = to_device(np.array([0, 4, 1], np.int32))
    gpu.softmax_cross_entropy_forward(loss, prob, x, labels)
    assert np.isnan(host(loss)[0])
    gpu.softmax_cross_entropy_backward(dx, to_device(np.ones(1, np.float32)), prob, labels)
    got = host(dx)
    assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2]]).all()


@pytest.mark.parametrize(("n", "c"), [(1, 1), (4, 40)])  # 40 classes: more than a warp per row
def test_softmax_cross_entropy_onehot(rng, n, c):
    x = _randn(rng, (n, c))
    t = rng.dirichlet(np.ones(c), n).astype(np.float32)
    t[0, 0] = 0.0
    nan = np.full((n, c), np.nan, np.float32)
    loss = np.full(1, np.nan, np.float32)
    (_, prob), _ = run_twins("softmax_cross_entropy_forward_onehot", [loss, nan, x, t], [0, 1])
    dloss = np.array([1.5], np.float32)
    run_twins("softmax_cross_entropy_backward_onehot", [nan, dloss, prob, t], writes=[0])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("target", [np.int32, np.int64, np.float32, np.float64])
def test_softmax_cross_entropy_takes_one_hot_rows_of_every_dtype(rng, dtype, target):
    """SINGA's Model documentation fills an int32 tensor with one-hot rows: the CUDA kernels
    take every target dtype the CPU's take, whatever the logits' dtype, with the CPU's numbers."""
    n, c = 3, 4
    x = _randn(rng, (n, c), dtype)
    t = np.eye(c, dtype=target)[rng.integers(0, c, n)]
    nan = np.full((n, c), np.nan, dtype)
    loss = np.full(1, np.nan, dtype)
    forward = "softmax_cross_entropy_forward_onehot"
    (_, prob), _ = run_twins(forward, [loss, nan, x, t], [0, 1], dtype)
    dloss = np.array([1.5], dtype)
    run_twins("softmax_cross_entropy_backward_onehot", [nan, dloss, prob, t], [0], dtype)


def test_one_hot_targets_of_another_kind_are_refused_in_one_line():
    x = to_device(np.zeros((2, 3), np.float32))
    loss, prob = empty_like(np.zeros(1, np.float32)), empty_like(np.zeros((2, 3), np.float32))
    flags = to_device(np.zeros((2, 3), np.uint8))
    with pytest.raises(TypeError, match="t has dtype uint8; targets are int32, int64, float32"):
        gpu.softmax_cross_entropy_forward_onehot(loss, prob, x, flags)


@pytest.mark.parametrize("shape", [(1, 1), (3, 50)])  # 150 elements: more than one block's worth
def test_mse(rng, shape):
    x, t = _randn(rng, shape), _randn(rng, shape)
    nan = np.full(shape, np.nan, np.float32)
    loss = np.full(1, np.nan, np.float32)
    (_, err), _ = run_twins("mse_forward", [loss, nan, x, t], writes=[0, 1])
    run_twins("mse_backward", [nan, np.array([2.0], np.float32), err], writes=[0])


# ---------------------------------------------------------------- optimisers
@pytest.mark.parametrize(
    ("momentum", "dampening", "nesterov"), [(0.0, 0.0, False), (0.9, 0.1, False), (0.9, 0.0, True)]
)
def test_sgd_update(rng, momentum, dampening, nesterov):
    param, grad, buf = (_randn(rng, 257) for _ in range(3))
    args = [param, grad, buf, 0.1, momentum, dampening, 1e-3, nesterov]
    run_twins("sgd_update", args, writes=[0, 1, 2])


@pytest.mark.parametrize("finished", [0, 4])
def test_adam_update_reads_the_step_count_on_the_device(rng, finished):
    param, grad, m = (_randn(rng, 257) for _ in range(3))
    v = np.abs(_randn(rng, 257))
    steps = np.array([finished], np.int32)
    args = [param, grad, m, v, steps, 1e-2, 0.9, 0.999, 1e-8, 1e-4]
    _, got = run_twins("adam_update", args, writes=[0, 2, 3, 4])
    assert got[3].tolist() == [finished]  # only read: the caller increments it


# Decay schedules (init, rate, period, staircase), read by every thread at steps[0].
LR_SCHEDULE = (0.1, 0.5, 2.0, True)
RATE_SCHEDULE = (0.9, 0.95, 1.0, False)


@pytest.mark.parametrize("finished", [0, 5])
@pytest.mark.parametrize("dtype", FLOATS)
def test_rmsprop_and_adagrad_optimiser_updates_read_schedules_at_the_step_count(
    rng, finished, dtype
):
    param, grad = (_randn(rng, 257, dtype) for _ in range(2))
    state = np.abs(_randn(rng, 257, dtype))
    steps = np.array([finished], np.int32)
    args = [param, grad, state, steps, LR_SCHEDULE, RATE_SCHEDULE, 1e-6, 1e-3]
    _, got = run_twins("rmsprop_update", args, writes=[0, 2, 3], dtype=dtype)
    assert got[2].tolist() == [finished]  # only read
    args = [param, grad, state, steps, LR_SCHEDULE, 1e-6, 1e-3]
    _, got = run_twins("adagrad_update", args, writes=[0, 2, 3], dtype=dtype)
    assert got[2].tolist() == [finished]


@pytest.mark.parametrize("finished", [0, 5])
def test_sgd_and_adam_optimiser_updates_read_schedules_at_the_step_count(rng, finished):
    param, grad, buf = (_randn(rng, 257) for _ in range(3))
    v = np.abs(_randn(rng, 257))
    steps = np.array([finished], np.int32)
    args = [param, grad, buf, LR_SCHEDULE, RATE_SCHEDULE, 0.1, 1e-3, False, steps]
    run_twins("sgd_update", args, writes=[0, 1, 2])
    args = [param, grad, buf, v, steps, LR_SCHEDULE, RATE_SCHEDULE, 0.999, 1e-8, 1e-4]
    run_twins("adam_update", args, writes=[0, 2, 3])


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
def test_optimisers_with_schedules_on_the_cuda_device_match_the_cpu(rng, use_graph):
    """On a GPU a replayed step is one CUDA graph: the schedules must follow the step count it
    reads on the device, not the values of the step that was captured."""

    def lr():
        return opt.ExponentialDecay(0.05, 2, 0.5, staircase=True)

    optimizers = [
        lambda: opt.SGD(lr=lr(), momentum=opt.ExponentialDecay(0.9, 1, 0.8), weight_decay=1e-2),
        lambda: opt.Adam(lr=lr(), beta_1=opt.ExponentialDecay(0.9, 3, 0.9)),
        lambda: opt.RMSProp(lr=lr(), rho=0.8, weight_decay=1e-3),
        lambda: opt.AdaGrad(lr=lr(), epsilon=1e-6),
    ]
    w0 = _randn(rng, (3, 5))
    grads = [_randn(rng, (3, 5)) for _ in range(6)]
    for make in optimizers:
        on_cpu, _ = train_on_gradients(
            device.create_cpu_device("1MiB"), make(), w0, grads, use_graph
        )
        on_gpu, _ = train_on_gradients(device.create_cuda_gpu("1MiB"), make(), w0, grads, use_graph)
        assert_close(on_gpu, on_cpu)
        assert not np.allclose(on_cpu, w0)
