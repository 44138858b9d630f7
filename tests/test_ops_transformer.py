"""The operators of BERT- and GPT-2-style graphs (what nnmem.sonnx imports): layer_norm, gelu,
numpy-style matmul, and the gather, where, slice, pow, ... they are written with. Every backward
against finite differences (tests/gradcheck.py: float64, every element, random cotangent), and
the new kernels on the CUDA device against the CPU's (a GPU, or NUMBA_ENABLE_CUDASIM=1 in a
pytest process of its own; skipped otherwise)."""

import math

import numpy as np
import pytest
from gradcheck import check_gradients, forward_and_backward

from nnmem import autograd, device, tensor
from nnmem.ops import rearrange

rng = np.random.default_rng(7)


def randn(*shape):
    return rng.standard_normal(shape)


def positive(*shape):
    return rng.uniform(0.5, 2.0, shape)


@pytest.fixture
def cpu():
    return device.create_cpu_device("16MiB")


def on(dev, a):
    return tensor.from_numpy(np.asarray(a), dev)


def numpy_layer_norm(x, scale, bias, axis, eps):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + (0 if bias is None else bias)


# -- layer_norm ---------------------------------------------------------------------------------
def test_layer_norm_values_and_gradients_over_the_last_axis(cpu):
    x, g, b = randn(2, 3, 5) * 3 + 1, randn(5), randn(5)
    y = autograd.layer_norm(on(cpu, x), on(cpu, g), on(cpu, b), epsilon=1e-3)
    np.testing.assert_allclose(tensor.to_numpy(y), numpy_layer_norm(x, g, b, -1, 1e-3), rtol=1e-12)
    check_gradients(lambda x, g, b: autograd.layer_norm(x, g, b), x, g, b)


def test_layer_norm_over_several_axes_without_bias(cpu):
    x, g = randn(2, 3, 2), randn(3, 2)
    y = autograd.layer_norm(on(cpu, x), on(cpu, g), None, axis=1)
    np.testing.assert_allclose(
        tensor.to_numpy(y), numpy_layer_norm(x, g, None, 1, 1e-5), rtol=1e-12
    )
    check_gradients(lambda x, g: autograd.layer_norm(x, g, axis=1, epsilon=1e-2), x, g)


def test_layer_norm_keeps_x_and_two_numbers_a_row_not_y(cpu):
    autograd.training = True
    x = tensor.Tensor((4, 3, 6), cpu, tensor.float64, requires_grad=True, stores_grad=True)
    x.copy_from_numpy(randn(4, 3, 6))
    g = tensor.Tensor((6,), cpu, tensor.float64, requires_grad=True, stores_grad=True)
    g.copy_from_numpy(randn(6))
    y = autograd.layer_norm(x, g, on(cpu, randn(6)))
    saved = y.creator.saved
    assert [t.shape for t in saved] == [(4, 3, 6), (6,), (12,), (12,)]
    assert saved[0].block is x.block  # x itself, not a copy (nor x-hat, nor y)
    mean, rstd = (tensor.to_numpy(t) for t in saved[2:])
    rows = tensor.to_numpy(x).reshape(12, 6)
    np.testing.assert_allclose(mean, rows.mean(1), rtol=1e-12)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(rows.var(1) + 1e-5), rtol=1e-12)


def test_layer_norm_bad_parameters_are_named(cpu):
    x = on(cpu, randn(2, 4))
    with pytest.raises(ValueError, match=r"scale \(3,\).*x.shape\[axis:\] = \(4,\)"):
        autograd.layer_norm(x, on(cpu, randn(3)), None)
    with pytest.raises(ValueError, match="bias"):
        autograd.layer_norm(x, on(cpu, randn(4)), on(cpu, randn(2, 4)))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        autograd.layer_norm(x, on(cpu, randn(4)), None, axis=2)
    with pytest.raises(TypeError, match="float"):
        autograd.layer_norm(on(cpu, np.ones((2, 4), np.int32)), on(cpu, randn(4)))


# -- gelu ---------------------------------------------------------------------------------------
def test_gelu_exact_and_tanh_values(cpu):
    x = np.linspace(-4, 4, 17)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    approx = 0.5 * x * (1 + np.tanh(u))
    np.testing.assert_allclose(tensor.to_numpy(autograd.gelu(on(cpu, x))), exact, rtol=1e-14)
    got = tensor.to_numpy(autograd.gelu(on(cpu, x), approximate="tanh"))
    np.testing.assert_allclose(got, approx, rtol=1e-12, atol=1e-15)
    assert np.abs(got - exact).max() > 1e-5  # the two really differ
    with pytest.raises(ValueError, match="'none' \\(erf\\) or 'tanh'"):
        autograd.gelu(on(cpu, x), approximate="fast")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradient(approximate):
    check_gradients(lambda x: autograd.gelu(x, approximate), randn(3, 5) * 2)


# -- matmul as numpy.matmul ---------------------------------------------------------------------
SHAPES = [
    ((3, 4), (4, 5)),  # 2-D
    ((2, 3, 4), (4, 5)),  # a transformer's Linear: (B, S, K) @ (K, N)
    ((2, 2, 3, 4), (2, 2, 4, 3)),  # attention scores, equal batches
    ((2, 1, 3, 4), (1, 2, 4, 3)),  # both broadcast
    ((3, 4), (2, 4, 5)),  # a 2-D left operand against a batch
    ((2, 3, 4), (3, 1, 4, 2)),  # different ranks
]


@pytest.mark.parametrize("sa, sb", SHAPES)
def test_matmul_broadcasts_as_numpy(cpu, sa, sb):
    a, b = randn(*sa), randn(*sb)
    got = tensor.to_numpy(autograd.matmul(on(cpu, a), on(cpu, b)))
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-12)
    check_gradients(autograd.matmul, a, b)


@pytest.mark.parametrize("sa, sb", [((3, 2, 4), (2, 4, 5)), ((3, 4), (5, 4)), ((4,), (4, 3))])
def test_matmul_shapes_that_do_not_chain(cpu, sa, sb):
    with pytest.raises(ValueError, match="do not chain.*same leading sizes"):
        autograd.matmul(on(cpu, randn(*sa)), on(cpu, randn(*sb)))


# -- the other operators of the graphs ----------------------------------------------------------
def test_softmax_on_the_last_axis_of_4d():
    check_gradients(lambda x: autograd.softmax(x, -1), randn(2, 2, 2, 3))


def test_where_with_broadcasting_and_an_int_condition(cpu):
    cond = np.array([[1, 0, 1], [0, 1, 1]], np.int32)
    a, b = randn(2, 2, 3), randn(1, 3)
    got = autograd.where(on(cpu, a), on(cpu, b), on(cpu, cond))
    np.testing.assert_array_equal(tensor.to_numpy(got), np.where(cond == 1, a, b))

    def fn(a, b):
        return autograd.where(a, b, tensor.from_numpy(cond, a.device))

    check_gradients(fn, a, b)
    check_gradients(lambda a, b: autograd.where(a, b, cond.astype(bool)), a, b)


def test_expand():
    check_gradients(lambda x: autograd.expand(x, (2, 3, 4)), randn(3, 1))


def test_gather_with_int32_ids_is_an_embedding_lookup(cpu, monkeypatch):
    def no_host_read(t):
        raise AssertionError("gather read the ids on the host")

    monkeypatch.setattr(rearrange, "to_numpy", no_host_read)  # the ids stay on the device
    ids = np.array([[0, 2, 2], [3, 0, 1]], np.int32)  # (B, S), id 2 used twice
    table = randn(4, 3)
    got = autograd.gather(on(cpu, table), 0, on(cpu, ids))
    np.testing.assert_array_equal(tensor.to_numpy(got), table[ids])
    grads = check_gradients(
        lambda w: autograd.gather(w, 0, tensor.from_numpy(ids, w.device)), table
    )
    assert np.abs(grads[0][2]).sum() > 0
    cube = randn(4, 2, 2)  # a table of more than 2 axes
    got = autograd.gather(on(cpu, cube), 0, on(cpu, ids))
    np.testing.assert_array_equal(tensor.to_numpy(got), cube[ids])
    check_gradients(lambda w: autograd.gather(w, 0, tensor.from_numpy(ids, w.device)), cube)


def test_gather_with_a_tensor_along_another_axis(cpu):
    x = randn(2, 4)
    got = autograd.gather(on(cpu, x), 1, on(cpu, np.array([3, -1, 0], np.int32)))
    np.testing.assert_array_equal(tensor.to_numpy(got), x[:, [3, -1, 0]])


def test_split_and_slice_with_steps_and_negative_indices(cpu):
    check_gradients(lambda x: autograd.split(x, 1, [1, 2])[1], randn(2, 3))
    x = randn(5, 4)
    got = autograd.slice(on(cpu, x), [-1, 0], [-10, 5], [0, 1], [-2, 2])
    np.testing.assert_array_equal(tensor.to_numpy(got), x[-1:-10:-2, 0:5:2])
    check_gradients(lambda x: autograd.slice(x, [-1, 0], [-10, 5], [0, 1], [-2, 2]), x)


def test_cast_to_the_same_float_dtype_passes_the_gradient(cpu):
    check_gradients(lambda x: autograd.mul(autograd.cast(x, tensor.float64), x), randn(3))
    mask = autograd.cast(on(cpu, np.array([1, 0], np.int32)), tensor.float32)
    assert mask.dtype == tensor.float32 and tensor.to_numpy(mask).tolist() == [1.0, 0.0]


def test_pointwise_and_broadcast_arithmetic():
    check_gradients(autograd.erf, randn(2, 3))
    check_gradients(autograd.sqrt, positive(2, 3))
    check_gradients(autograd.pow, positive(2, 3), randn(3))  # tensor ** tensor
    check_gradients(lambda x: autograd.pow(x, 3.0), randn(2, 3))  # tensor ** scalar
    check_gradients(autograd.div, randn(2, 3), positive(3))
    check_gradients(autograd.add, randn(2, 3, 4), randn(4))
    check_gradients(autograd.mul, randn(2, 1, 4), randn(3, 1))
    check_gradients(autograd.sub, randn(4), randn(2, 3, 4))


def test_mean_transpose_reshape():
    check_gradients(lambda x: autograd.reduce_mean(x, [-1], keepdims=True), randn(2, 3, 4))
    check_gradients(lambda x: autograd.transpose(x, (0, 2, 1, 3)), randn(2, 3, 2, 2))
    check_gradients(lambda x: autograd.reshape(x, (2, -1)), randn(2, 3, 2))


# -- the CUDA kernels against the CPU's (simulator or GPU) --------------------------------------
LONG_SCALE = randn(130)
CASES = {
    # 9 rows: more than dscale's 8 row shares; 130 features: more than a row block's 128 threads
    "layer_norm": (lambda x, g, b: autograd.layer_norm(x, g, b), [(9, 5), (5,), (5,)]),
    "layer_norm_long_rows": (
        lambda x: autograd.layer_norm(x, tensor.from_numpy(LONG_SCALE, x.device)),
        [(2, 130)],
    ),
    "layer_norm_axis1": (lambda x, g: autograd.layer_norm(x, g, axis=1), [(2, 3, 4), (3, 4)]),
    "gelu": (autograd.gelu, [(3, 7)]),
    "gelu_tanh": (lambda x: autograd.gelu(x, "tanh"), [(3, 7)]),
    "matmul_weight": (autograd.matmul, [(2, 3, 4), (4, 5)]),
    "matmul_broadcast": (autograd.matmul, [(2, 1, 3, 4), (1, 2, 4, 3)]),
    "embedding": (
        lambda w: autograd.gather(
            w, 0, tensor.from_numpy(np.array([[1, 0, 1]], np.int32), w.device)
        ),
        [(3, 4)],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_gives_the_cpu_numbers(device_kind, case):
    if device_kind == "cpu":
        pytest.skip("compares the CUDA device with the CPU")
    fn, shapes = CASES[case]
    arrays = [randn(*s) for s in shapes]
    scratch = device.create_cpu_device("1MiB")
    out_shape = fn(*[on(scratch, a) for a in arrays]).shape
    cotangent = randn(*out_shape)
    want = forward_and_backward(device.create_cpu_device("16MiB"), fn, arrays, cotangent)
    got = forward_and_backward(device.create_cuda_gpu("16MiB"), fn, arrays, cotangent)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_layernorm_kernels_serial_and_parallel_give_the_same_bits():
    """kernels/cpu/layernorm.py's kernels are by_size: one row (column) per thread from
    PARALLEL_FROM elements; each sum runs in the same order either way."""
    from nnmem.kernels.cpu import _jit, layernorm

    n = 64
    rows = _jit.PARALLEL_FROM // n + 3
    x, dy = randn(rows, n).astype(np.float32), randn(rows, n).astype(np.float32)
    scale = randn(n).astype(np.float32)
    results = []
    for pick in ("serial", "parallel"):
        y, mean, rstd = np.empty_like(x), np.empty(rows, np.float32), np.empty(rows, np.float32)
        getattr(layernorm.layernorm_forward, pick)(y, mean, rstd, x, scale, 1e-5)
        dx, dscale = np.empty_like(x), np.empty(n, np.float32)
        getattr(layernorm.layernorm_backward_data, pick)(dx, dy, x, mean, rstd, scale)
        getattr(layernorm.layernorm_backward_scale, pick)(dscale, dy, x, mean, rstd)
        results.append((y, mean, rstd, dx, dscale))
    assert (
        layernorm.layernorm_forward.pick(y, mean, rstd, x) is layernorm.layernorm_forward.parallel
    )
    for serial, parallel in zip(*results):
        np.testing.assert_array_equal(parallel, serial)
