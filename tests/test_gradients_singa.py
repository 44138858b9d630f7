"""The operators SINGA's autograd and tensor modules add to nnmem's first set, against finite
differences (every element, random cotangent, float64: tests/gradcheck.py), and their values
against NumPy."""

import numpy as np
import pytest
from gradcheck import check_gradients

from nnmem import autograd, device, layer, operation, tensor

rng = np.random.default_rng(7)


def randn(*shape):
    return rng.standard_normal(shape)


def positive(*shape):
    return rng.uniform(0.2, 2.0, shape)


def away_from_zero(*shape):
    return rng.uniform(0.1, 1.0, shape) * rng.choice([-1.0, 1.0], shape)


@pytest.mark.parametrize(
    "fn, make",
    [
        (autograd.tanh, randn),
        (autograd.exp, randn),
        (autograd.log, positive),
        (autograd.square, randn),
        (autograd.sqrt, positive),
        (autograd.abs, away_from_zero),
        (lambda x: autograd.leakyrelu(x, 0.2), away_from_zero),
        (autograd.reciprocal, away_from_zero),
        (lambda x: tensor.pow(x, 2.5), positive),
        (lambda x: x + 1.5, randn),
        (lambda x: 2.0 - x, randn),
        (lambda x: -x, randn),
        (lambda x: x / 4.0, randn),
        (lambda x: 3.0 / x, away_from_zero),
    ],
)
def test_pointwise(fn, make):
    check_gradients(fn, make(3, 4))


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 3, 1), (1, 4)), ((1,), (2, 3)), ((2, 1, 3), (2, 4, 1))],
)
@pytest.mark.parametrize("how", ["add", "sub", "mul", "div"])
def test_broadcast_arithmetic(how, a_shape, b_shape):
    fn = {"add": autograd.add, "sub": autograd.sub, "mul": autograd.mul, "div": autograd.div}[how]
    b = away_from_zero(*b_shape) if how == "div" else randn(*b_shape)
    check_gradients(fn, randn(*a_shape), b)


def test_broadcast_values_match_numpy():
    dev = device.create_cpu_device("16MiB")
    a, b = randn(2, 3, 1).astype(np.float32), away_from_zero(1, 4).astype(np.float32)
    ta, tb = tensor.from_numpy(a, dev), tensor.from_numpy(b, dev)
    for got, want in [
        (ta + tb, a + b),
        (ta - tb, a - b),
        (autograd.mul(ta, tb), a * b),
        (ta / tb, a / b),
        (tensor.gt(ta, tb), (a > b).astype(np.float32)),
        (ta < 0.0, (a < 0).astype(np.float32)),
    ]:
        np.testing.assert_array_equal(tensor.to_numpy(got), want)


def test_shapes_that_do_not_broadcast_are_refused():
    dev = device.create_cpu_device("16MiB")
    a, b = tensor.zeros((2, 3), dev), tensor.zeros((4,), dev)
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4,\) do not broadcast"):
        autograd.add(a, b)
    with pytest.raises(TypeError, match="add: a tensor and a str"):
        a + "1"
    with pytest.raises(TypeError, match="gt: a tensor and a NoneType"):
        a > None


@pytest.mark.parametrize("axes", [None, 0, 1, (0, 2), -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_and_mean(axes, keepdims):
    x = randn(2, 3, 4)
    check_gradients(lambda t: autograd.reduce_sum(t, axes, keepdims), x)
    check_gradients(lambda t: autograd.reduce_mean(t, axes, keepdims), x)
    dev = device.create_cpu_device("16MiB")
    got = tensor.to_numpy(autograd.reduce_mean(tensor.from_numpy(x, dev), axes, keepdims))
    np.testing.assert_allclose(got, np.mean(x, axis=axes, keepdims=keepdims), rtol=1e-12)


@pytest.mark.parametrize("perm", [None, (1, 0, 2), (2, 0, 1), (0, 2, 1)])
def test_transpose(perm):
    x = randn(2, 3, 4)
    check_gradients(lambda t: autograd.transpose(t, perm), x)
    dev = device.create_cpu_device("16MiB")
    got = tensor.to_numpy(autograd.transpose(tensor.from_numpy(x, dev), perm))
    np.testing.assert_array_equal(got, np.transpose(x, perm))


@pytest.mark.parametrize(
    "key", [1, -1, (slice(None), 2), (0, slice(1, 3)), (slice(None, None, 2), slice(3, 0, -1))]
)
def test_slicing(key):
    x = randn(3, 4, 2)
    check_gradients(lambda t: t[key], x)
    dev = device.create_cpu_device("16MiB")
    got = tensor.to_numpy(tensor.from_numpy(x, dev)[key])
    keys = key if isinstance(key, tuple) else (key,)  # SINGA: an int keeps its axis
    np.testing.assert_array_equal(
        got, x[tuple(slice(k, k + 1 or None) if isinstance(k, int) else k for k in keys)]
    )


def test_squeeze_and_unsqueeze_are_views():
    dev = device.create_cpu_device("16MiB")
    t = tensor.from_numpy(randn(1, 3, 1), dev)
    assert autograd.squeeze(t).shape == (3,)
    assert autograd.squeeze(t, 0).shape == (3, 1)
    assert autograd.unsqueeze(autograd.squeeze(t), [0, 2]).shape == (1, 3, 1)
    assert autograd.squeeze(t).block is t.block
    with pytest.raises(ValueError, match="size 1"):
        autograd.squeeze(t, 1)
    check_gradients(lambda u: autograd.unsqueeze(autograd.squeeze(u), 0) * 2.0, randn(1, 3, 1))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(axis):
    x = randn(2, 3, 4)
    check_gradients(lambda t: autograd.softmax(t, axis), x)
    dev = device.create_cpu_device("16MiB")
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    got = tensor.to_numpy(autograd.softmax(tensor.from_numpy(x, dev), axis))
    np.testing.assert_allclose(got, e / e.sum(axis=axis, keepdims=True), rtol=1e-12)


def test_cross_entropy_and_binary_cross_entropy():
    p = rng.uniform(0.05, 0.95, (4, 3))
    t = np.eye(3)[rng.integers(0, 3, 4)]
    check_gradients(lambda x: autograd.cross_entropy(x, _const(t, x)), p)
    check_gradients(lambda x: autograd.binary_cross_entropy(x, _const(t, x)), p)
    dev = device.create_cpu_device("16MiB")
    tp, tt = tensor.from_numpy(p, dev), tensor.from_numpy(t, dev)
    want_ce = -(t * np.log(p)).sum() / 4
    want_bce = -(t * np.log(p + 1e-4) + (1 - t) * np.log(1.0001 - p)).sum() / 4
    np.testing.assert_allclose(tensor.to_numpy(autograd.cross_entropy(tp, tt)), [want_ce])
    np.testing.assert_allclose(tensor.to_numpy(autograd.binary_cross_entropy(tp, tt)), [want_bce])


def _const(a, like):
    return tensor.from_numpy(a, like.device)


def test_where():
    cond = (rng.random((3, 4)) > 0.5).astype(np.float64)
    check_gradients(lambda x, y: autograd.where(x, y, cond), randn(3, 4), randn(3, 4))
    dev = device.create_cpu_device("16MiB")
    x, y = randn(3, 4), randn(3, 4)
    got = autograd.where(tensor.from_numpy(x, dev), tensor.from_numpy(y, dev), cond.tolist())
    np.testing.assert_array_equal(tensor.to_numpy(got), np.where(cond > 0, x, y))


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(trans_a, trans_b):
    a = randn(4, 3) if trans_a else randn(3, 4)
    b = randn(5, 4) if trans_b else randn(4, 5)
    check_gradients(
        lambda x, y, c: autograd.gemm(x, y, c, 0.5, 2.0, trans_a, trans_b), a, b, randn(5)
    )


def test_gemm_reads_its_operands_transposed_in_place():
    """A fully connected layer as ONNX writes it, y = x W^T + b: one GEMM reads W transposed
    where it lies; no transposed copy of W is made in forward, none of dW in backward."""
    dev = device.create_cpu_device("16MiB")
    x = tensor.Tensor((2, 4), dev, requires_grad=True, stores_grad=True).gaussian(0.0, 1.0)
    w = tensor.Tensor((3, 4), dev, requires_grad=True, stores_grad=True).gaussian(0.0, 1.0)
    autograd.training = True
    try:
        with operation.tracing() as trace:
            y = autograd.gemm(x, w, None, 1.0, 1.0, 0, 1)
        grads = autograd.gradients(autograd.reduce_sum(y, keepdims=False))
    finally:
        autograd.training = False
    assert [type(op).__name__ for op, _, _ in trace] == ["TransposedMatmul"]
    assert grads[w].shape == (3, 4) and grads[x].shape == (2, 4)
    np.testing.assert_allclose(
        tensor.to_numpy(y), tensor.to_numpy(x) @ tensor.to_numpy(w).T, rtol=1e-6
    )


def test_tensor_functions_match_numpy():
    dev = device.create_cpu_device("16MiB")
    a = rng.uniform(0.1, 1.0, (3, 4)).astype(np.float32)
    t = tensor.from_numpy(a, dev)
    close = np.testing.assert_allclose
    close(tensor.to_numpy(tensor.sum(t, 0)), a.sum(0), rtol=1e-6)
    close(tensor.to_numpy(tensor.sum(t)), [a.sum()], rtol=1e-6)
    close(tensor.average(t), a.mean(), rtol=1e-6)
    close(tensor.to_numpy(tensor.mult(t, t.T())), a @ a.T, rtol=1e-5)
    close(tensor.to_numpy(tensor.square(t)), a * a, rtol=1e-6)
    close(tensor.to_numpy(tensor.sigmoid(t)), 1 / (1 + np.exp(-a)), rtol=1e-6)
    close(tensor.to_numpy(tensor.concatenate([t, t], 1)), np.concatenate([a, a], 1))
    close(t.l1(), np.abs(a).sum() / a.size, rtol=1e-6)
    close(t.l2(), np.linalg.norm(a) / a.size, rtol=1e-6)
    s = np.exp(a - a.max(1, keepdims=True))
    close(tensor.to_numpy(tensor.softmax(t)), s / s.sum(1, keepdims=True), rtol=1e-6)


def test_inplace_arithmetic_writes_the_tensor_itself():
    dev = device.create_cpu_device("16MiB")
    t = tensor.from_numpy(np.arange(4, dtype=np.float32), dev)
    alias = t
    t /= 2.0
    t += tensor.from_numpy(np.ones(4, np.float32), dev)
    assert t is alias
    np.testing.assert_array_equal(tensor.to_numpy(alias), np.arange(4) / 2 + 1)


def test_comparisons_carry_no_gradient():
    autograd.training = True
    try:
        dev = device.create_cpu_device("16MiB")
        x = tensor.Tensor((3,), dev, requires_grad=True, stores_grad=True).set_value(1.0)
        mask = x > 0.5
        assert mask.creator is None
        grads = dict(autograd.backward(autograd.reduce_sum(x * mask)))
        np.testing.assert_array_equal(tensor.to_numpy(grads[x]), [1.0, 1.0, 1.0])
    finally:
        autograd.training = False


def test_embedding():
    ids = np.array([[0, 2, 2], [1, 0, 2]], np.int32)  # repeats: their gradients add up
    dev = device.create_cpu_device("16MiB")

    def lookup(w):
        return autograd.embedding(tensor.from_numpy(ids, w.device), w)

    check_gradients(lookup, randn(3, 4))
    w = randn(3, 4)
    got = tensor.to_numpy(
        autograd.embedding(tensor.from_numpy(ids, dev), tensor.from_numpy(w, dev))
    )
    np.testing.assert_array_equal(got, w[ids])
    with pytest.raises(IndexError, match="outside the table"):
        autograd.embedding(
            tensor.from_numpy(np.array([3], np.int32), dev), tensor.from_numpy(w, dev)
        )
    with pytest.raises(TypeError, match="int32"):
        autograd.embedding(
            tensor.from_numpy(ids.astype(np.float32), dev), tensor.from_numpy(w, dev)
        )


@pytest.mark.parametrize("group, c, o", [(2, 4, 6), (3, 3, 3), (1, 2, 3)])
@pytest.mark.parametrize("stride, padding", [(1, 1), (2, 0)])
def test_grouped_convolution(group, c, o, stride, padding):
    x, w, b = randn(2, c, 5, 5), randn(o, c // group, 3, 3), randn(o)
    check_gradients(
        lambda x_, w_, b_: autograd.conv2d(x_, w_, b_, stride, padding, "direct", group), x, w, b
    )
    dev = device.create_cpu_device("16MiB")
    t = [tensor.from_numpy(a, dev) for a in (x, w, b)]
    got = tensor.to_numpy(autograd.conv2d(*t, stride, padding, "direct", group))
    want = np.concatenate(  # each group is an ordinary convolution of its channels
        [
            tensor.to_numpy(
                autograd.conv2d(
                    tensor.from_numpy(x[:, g * (c // group) : (g + 1) * (c // group)].copy(), dev),
                    tensor.from_numpy(w[g * (o // group) : (g + 1) * (o // group)].copy(), dev),
                    tensor.from_numpy(b[g * (o // group) : (g + 1) * (o // group)].copy(), dev),
                    stride,
                    padding,
                    "direct",
                )
            )
            for g in range(group)
        ],
        axis=1,
    )
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_lstm_and_rnn_layers_backpropagate_through_time():
    xs, h0, c0 = [randn(2, 3) for _ in range(3)], randn(2, 4), randn(2, 4)

    def run_lstm(*ts):
        lstm = layer.LSTM(3, 4)
        ts[0].device.SetRandSeed(3)
        out, h, c = lstm(list(ts[:3]), (ts[3], ts[4]))
        return autograd.add(autograd.cat(out, 0), autograd.cat([h, c, h], 0))

    check_gradients(run_lstm, *xs, h0, c0, rtol=1e-5)

    def run_rnn(*ts):
        rnn = layer.RNN(3, 4)
        ts[0].device.SetRandSeed(3)
        out, h = rnn(list(ts[:3]), ts[3])
        return autograd.cat(out + [h], 0)

    check_gradients(run_rnn, *xs, h0, rtol=1e-5)


def test_a_tensor_of_more_dimensions_than_the_index_maps_have_is_refused():
    with pytest.raises(ValueError, match="up to 6 dimensions"):
        autograd.transpose(tensor.zeros((1,) * 7, device.create_cpu_device("1MiB")))


def in_range(low, high):
    return lambda *shape: rng.uniform(low, high, shape)


@pytest.mark.parametrize(
    "fn, make",
    [
        (autograd.sin, randn),
        (autograd.cos, randn),
        (autograd.tan, in_range(-1.0, 1.0)),
        (autograd.sinh, randn),
        (autograd.cosh, randn),
        (autograd.asin, in_range(-0.8, 0.8)),
        (autograd.acos, in_range(-0.8, 0.8)),
        (autograd.atan, randn),
        (autograd.asinh, randn),
        (autograd.acosh, in_range(1.2, 3.0)),
        (autograd.atanh, in_range(-0.8, 0.8)),
        (autograd.erf, randn),
        (autograd.softplus, randn),
        (autograd.softsign, away_from_zero),
        (lambda x: autograd.elu(x, 0.7), away_from_zero),
        (lambda x: autograd.selu(x), away_from_zero),
        (lambda x: autograd.hardsigmoid(x), in_range(-4.0, 4.0)),
        (lambda x: autograd.clip(x, -0.5, 0.5), away_from_zero),
        (lambda x: autograd.prelu(x, _const(np.array([0.1, 0.2, 0.3, 0.4]), x)), away_from_zero),
    ],
)
def test_more_pointwise(fn, make):
    check_gradients(fn, make(3, 4))


def test_pointwise_values_match_numpy():
    from math import erf

    dev = device.create_cpu_device("16MiB")
    x = np.array([-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 0.3])
    t = tensor.from_numpy(x, dev)
    v = tensor.to_numpy
    np.testing.assert_array_equal(v(autograd.round(t)), [-3, -2, -1, 0, 1, 2, 3, 0])
    np.testing.assert_array_equal(v(autograd.rounde(t)), [-2, -2, -0, 0, 0, 2, 2, 0])
    np.testing.assert_array_equal(v(autograd.ceil(t)), np.ceil(x))
    np.testing.assert_array_equal(v(autograd.floor(t)), np.floor(x))
    np.testing.assert_allclose(v(autograd.erf(t)), [erf(a) for a in x], rtol=1e-15)
    np.testing.assert_allclose(v(autograd.softplus(t)), np.log1p(np.exp(x)), rtol=1e-14)
    np.testing.assert_allclose(v(autograd.elu(t, 0.5)), np.where(x > 0, x, 0.5 * np.expm1(x)))
    np.testing.assert_array_equal(v(autograd.clip(t, -1.0, 1.0)), np.clip(x, -1, 1))
    np.testing.assert_array_equal(v(autograd._not(t)), x == 0)


@pytest.mark.parametrize("fn", [autograd.pow, autograd.max, autograd.min])
def test_binary_pow_max_min(fn):
    a, b = in_range(0.5, 2.0)(3, 4), in_range(0.5, 2.0)(4)
    check_gradients(fn, a, b)


def test_many_tensor_reductions():
    xs = [randn(2, 3) for _ in range(3)]
    check_gradients(autograd.mean, *xs)
    check_gradients(autograd.sum, *xs)
    dev = device.create_cpu_device("16MiB")
    ts = [tensor.from_numpy(x, dev) for x in xs]
    np.testing.assert_allclose(tensor.to_numpy(autograd.max(*ts)), np.maximum.reduce(xs))
    np.testing.assert_allclose(tensor.to_numpy(autograd.mean(*ts)), sum(xs) / 3)


def test_losses_and_similarities():
    check_gradients(lambda p, n: autograd.ranking_loss(p, n, 0.3), randn(5), randn(5))
    check_gradients(autograd.cossim, randn(3, 4), randn(3, 4))
    check_gradients(autograd.globalaveragepool, randn(2, 3, 2, 2))


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: autograd.slice(x, [1, 0], [3, 4], [0, 2], [1, 2]), (4, 3, 5)),
        (lambda x: autograd.cat(list(autograd.split(x, 1, [1, 2]))[::-1], 1), (2, 3)),
        (lambda x: autograd.gather(x, 1, [2, 0, 2]), (2, 3)),
        (lambda x: autograd.gather(x, 0, [[1, 0], [1, 1]]), (2, 3)),
        (lambda x: autograd.tile(x, [2, 1, 3]), (2, 3)),
        (lambda x: autograd.expand(x, (2, 3, 4)), (3, 1)),
        (lambda x: autograd.pad(x, "constant", [1, 0, 2, 1], 0.5), (2, 3)),
        (lambda x: autograd.upsample(x, "nearest", [1, 1, 2, 3]), (1, 2, 2, 2)),
        (lambda x: autograd.depth_to_space(x, 2, "DCR"), (1, 8, 2, 3)),
        (lambda x: autograd.depth_to_space(x, 2, "CRD"), (1, 8, 2, 3)),
        (lambda x: autograd.space_to_depth(x, 2), (1, 2, 4, 6)),
    ],
)
def test_rearrangements(fn, shape):
    check_gradients(fn, randn(*shape))


def test_rearrangement_values_match_numpy():
    dev = device.create_cpu_device("16MiB")
    x = randn(1, 8, 2, 3)
    t = tensor.from_numpy(x, dev)
    v = tensor.to_numpy
    got = v(autograd.depth_to_space(t, 2))  # ONNX's DCR reference
    want = x.reshape(1, 2, 2, 2, 2, 3).transpose(0, 3, 4, 1, 5, 2).reshape(1, 2, 4, 6)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(v(autograd.space_to_depth(autograd.depth_to_space(t, 2), 2)), x)
    np.testing.assert_array_equal(v(autograd.tile(t, [1, 1, 2, 1])), np.tile(x, (1, 1, 2, 1)))
    padded = v(autograd.pad(t, "constant", [0, 0, 1, 0, 0, 0, 0, 2], 9.0))
    np.testing.assert_array_equal(
        padded, np.pad(x, [(0, 0), (0, 0), (1, 0), (0, 2)], constant_values=9)
    )
    up = v(autograd.upsample(t, "nearest", [1, 1, 2, 2]))
    np.testing.assert_array_equal(up, x.repeat(2, 2).repeat(2, 3))
    np.testing.assert_array_equal(v(autograd.gather(t, 1, [3, 1])), x[:, [3, 1]])


def test_data_operators():
    dev = device.create_cpu_device("16MiB")
    t = tensor.from_numpy(np.array([[0.0, 2.0], [3.0, 0.0]]), dev)
    np.testing.assert_array_equal(tensor.to_numpy(autograd.shape(t)), [2, 2])
    np.testing.assert_array_equal(tensor.to_numpy(autograd.nonzero(t)), [[0, 1], [1, 0]])
    np.testing.assert_array_equal(tensor.to_numpy(autograd.cast(t, tensor.int32)), [[0, 2], [3, 0]])
    hot = autograd.onehot(-1, tensor.from_numpy(np.array([1, -1], np.int32), dev), 3, [0.0, 5.0])
    np.testing.assert_array_equal(tensor.to_numpy(hot), [[0, 5, 0], [0, 0, 5]])
    size = tensor.from_numpy(np.array([2, 3], np.int32), dev)
    np.testing.assert_array_equal(
        tensor.to_numpy(autograd.constant_of_shape(size, 4.0)), np.full((2, 3), 4.0)
    )
    a, b = (
        tensor.from_numpy(np.array([0.0, 1.0, 1.0]), dev),
        tensor.from_numpy(np.array([1.0, 1.0, 0.0]), dev),
    )
    np.testing.assert_array_equal(tensor.to_numpy(autograd._and(a, b)), [0, 1, 0])
    np.testing.assert_array_equal(tensor.to_numpy(autograd._or(a, b)), [1, 1, 1])
    np.testing.assert_array_equal(tensor.to_numpy(autograd._xor(a, b)), [1, 0, 1])


def test_gradients_is_a_dict_of_backward():
    autograd.training = True
    try:
        dev = device.create_cpu_device("16MiB")
        w = tensor.Tensor((3,), dev, requires_grad=True, stores_grad=True).set_value(2.0)
        grads = autograd.gradients(autograd.reduce_sum(autograd.square(w)))
        np.testing.assert_array_equal(tensor.to_numpy(grads[w]), [4.0, 4.0, 4.0])
    finally:
        autograd.training = False


def test_batched_matmul():
    check_gradients(autograd.matmul, randn(2, 3, 4, 5), randn(2, 3, 5, 2))
    dev = device.create_cpu_device("16MiB")
    a, b = randn(3, 2, 4), randn(3, 4, 5)
    got = tensor.to_numpy(autograd.matmul(tensor.from_numpy(a, dev), tensor.from_numpy(b, dev)))
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)
    with pytest.raises(ValueError, match="same leading sizes"):
        autograd.matmul(tensor.from_numpy(a, dev), tensor.from_numpy(randn(2, 4, 5), dev))


def test_singa_row_and_column_helpers():
    dev = device.create_cpu_device("16MiB")
    m = rng.uniform(1, 2, (2, 3)).astype(np.float32)
    col, row = np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0, 4.0], np.float32)
    t = tensor.from_numpy(m, dev)
    t.mult_column(tensor.from_numpy(col, dev))
    t.div_row(tensor.from_numpy(row, dev))
    np.testing.assert_allclose(tensor.to_numpy(t), m * col[:, None] / row, rtol=1e-6)
    M = tensor.from_numpy(m, dev)
    tensor.add_row(2.0, tensor.from_numpy(row, dev), 0.5, M)
    np.testing.assert_allclose(tensor.to_numpy(M), 0.5 * m + 2 * row, rtol=1e-6)
    np.testing.assert_allclose(
        tensor.to_numpy(tensor.sum_columns(t)), tensor.to_numpy(t).sum(1, keepdims=True), rtol=1e-6
    )
    y = tensor.from_numpy(np.ones(3, np.float32), dev)
    tensor.axpy(2.0, tensor.from_numpy(row, dev), y)
    np.testing.assert_array_equal(tensor.to_numpy(y), 1 + 2 * row)
    np.testing.assert_array_equal(
        tensor.to_numpy(tensor.repeat(tensor.from_numpy(m, dev), 2, 1)), np.repeat(m, 2, 1)
    )
    np.testing.assert_array_equal(
        tensor.to_numpy(tensor.from_numpy(m, dev).repeat(3)), np.repeat(m, 3)
    )
    alias = t.copy()
    assert alias.block is t.block and t.deepcopy().block is not t.block


def test_one_dimensional_pooling_layers():
    dev = device.create_cpu_device("16MiB")
    x = randn(2, 3, 8)
    t = tensor.from_numpy(x, dev)
    np.testing.assert_array_equal(
        tensor.to_numpy(layer.MaxPool1d(2)(t)), x.reshape(2, 3, 4, 2).max(-1)
    )
    np.testing.assert_allclose(
        tensor.to_numpy(layer.AvgPool1d(4)(t)), x.reshape(2, 3, 2, 4).mean(-1)
    )
    assert layer.Pooling2d(2, is_max=False)(tensor.from_numpy(randn(1, 1, 4, 4), dev)).shape == (
        1,
        1,
        2,
        2,
    )
