"""Every operator's backward against finite differences (every element, random cotangent,
float64)."""

import numpy as np
import pytest
from gradcheck import check_gradients

from nnmem import autograd, tensor
from nnmem.ops.arith import Scale

rng = np.random.default_rng(42)


def randn(*shape):
    return rng.standard_normal(shape)


def away_from_zero(*shape):
    """Values with |v| >= 0.1, so that a finite difference never crosses ReLU's kink."""
    v = rng.uniform(0.1, 1.0, shape)
    return v * rng.choice([-1.0, 1.0], shape)


def distinct(*shape):
    """A permutation of well-separated values: no ties for max pooling, no flip under eps."""
    return rng.permutation(np.arange(np.prod(shape), dtype=np.float64)).reshape(shape) * 0.01


def test_add_sub_mul():
    check_gradients(autograd.add, randn(3, 4), randn(3, 4))
    check_gradients(autograd.sub, randn(3, 4), randn(3, 4))
    check_gradients(autograd.mul, randn(3, 4), randn(3, 4))


def test_scale_and_tensor_operators():
    check_gradients(lambda x: Scale(-2.5)(x), randn(5))
    check_gradients(lambda a, b: a * b + a - b, randn(2, 3), randn(2, 3))


def test_input_used_twice_aggregates_its_gradient():
    # x feeds two operators: backward must sum both contributions (no split layer needed).
    check_gradients(lambda x: autograd.mul(x, x), randn(6))
    check_gradients(
        lambda x: autograd.add(autograd.relu(x), autograd.sigmoid(x)), away_from_zero(2, 5)
    )


def test_relu_sigmoid():
    check_gradients(autograd.relu, away_from_zero(4, 5))
    check_gradients(autograd.sigmoid, randn(4, 5) * 3)


def test_matmul_add_bias():
    check_gradients(autograd.matmul, randn(3, 4), randn(4, 5))
    check_gradients(autograd.add_bias, randn(3, 4), randn(4))


def test_reshape_flatten():
    check_gradients(lambda x: autograd.reshape(x, (6, -1)), randn(2, 3, 4))
    check_gradients(
        lambda x: autograd.mul(autograd.flatten(x), autograd.flatten(x)), randn(2, 3, 2)
    )


@pytest.mark.parametrize("algorithm", ["gemm", "direct"])
@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1), ((1, 2), (2, 0))])
def test_conv2d(algorithm, stride, padding):
    check_gradients(
        lambda x, w, b: autograd.conv2d(x, w, b, stride, padding, algorithm),
        randn(2, 2, 5, 6),
        randn(3, 2, 3, 2),
        randn(3),
    )


def test_conv2d_3x3_on_padded_planes():
    """3x3 filters, stride 1, padding 1: the padded-plane kernels (kernels/cpu/conv3x3.py),
    named: with "auto" the algorithm is the fastest at the first run, and the differences'
    rounding (about 1e-16 of the objective over eps) then depends on which it was.

    The convolution is linear in each input, so central differences have no truncation error
    at any step: eps = 1e-3 makes their rounding error 1000 times smaller than at 1e-6, where
    it reached 1e-8 (2e-6 relative) on one entry of dw with the forward pass's fused
    multiply-adds; the check's tolerances are 10 (atol) and 100 (rtol) times tighter than the
    defaults."""
    check_gradients(
        lambda x, w, b: autograd.conv2d(x, w, b, 1, 1, "conv3x3"),
        randn(2, 3, 5, 4),
        randn(4, 3, 3, 3),
        randn(4),
        eps=1e-3,
        rtol=1e-8,
        atol=1e-10,
    )


def test_conv3x3_refuses_another_geometry():
    x, w = tensor.from_numpy(randn(1, 2, 5, 5)), tensor.from_numpy(randn(3, 2, 3, 3))
    with pytest.raises(ValueError, match="3x3 filters with stride 1 and padding 1"):
        autograd.conv2d(x, w, None, 2, 1, "conv3x3")
    with pytest.raises(ValueError, match="for group=1"):
        autograd.conv2d(x, tensor.from_numpy(randn(2, 1, 3, 3)), None, 1, 1, "conv3x3", 2)


def test_conv2d_without_bias():
    check_gradients(
        lambda x, w: autograd.conv2d(x, w, None, 1, 1), randn(1, 3, 4, 4), randn(2, 3, 3, 3)
    )


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1), ((2, 3), 1, 0)])
def test_pooling(kernel, stride, padding):
    check_gradients(
        lambda x: autograd.pooling_2d(x, kernel, stride, padding, is_max=True), distinct(2, 2, 5, 6)
    )
    check_gradients(
        lambda x: autograd.pooling_2d(x, kernel, stride, padding, is_max=False), randn(2, 2, 5, 6)
    )


def test_batchnorm_training():
    def bn(x, scale, bias):
        c = x.shape[1]
        running_mean = tensor.zeros((c,), x.device, x.dtype)
        running_var = tensor.ones((c,), x.device, x.dtype)
        return autograd.batchnorm_2d(x, scale, bias, running_mean, running_var)

    check_gradients(bn, randn(3, 2, 3, 2), randn(2), randn(2), rtol=1e-5)


def test_cat():
    check_gradients(lambda a, b: autograd.cat([a, b], axis=1), randn(2, 3, 2), randn(2, 1, 2))
    check_gradients(
        lambda a, b, c: autograd.cat([a, b, c], axis=0), randn(1, 2), randn(2, 2), randn(3, 2)
    )


def test_dropout():
    check_gradients(lambda x: autograd.dropout(x, 0.4), randn(4, 6))


def test_softmax_cross_entropy_class_ids_and_one_hot():
    labels = np.array([2, 0, 1, 2], dtype=np.int32)

    def with_ids(x):
        return autograd.softmax_cross_entropy(x, tensor.from_numpy(labels, x.device))

    def with_one_hot(x):
        t = np.eye(3, dtype=np.int32)[labels]
        return autograd.softmax_cross_entropy(x, tensor.from_numpy(t, x.device))

    g_ids = check_gradients(with_ids, randn(4, 3) * 2)
    g_hot = check_gradients(with_one_hot, randn(4, 3) * 2)
    assert not np.allclose(g_ids[0], 0)
    assert g_hot[0].shape == (4, 3)


def test_mean_square_error():
    target = randn(3, 4)
    check_gradients(
        lambda x: autograd.mse_loss(x, tensor.from_numpy(target, x.device)), randn(3, 4)
    )


def test_small_network_end_to_end():
    """conv -> bn -> relu -> pool -> flatten -> linear -> loss, every parameter checked."""
    labels = np.array([1, 0], dtype=np.int32)

    def net(x, w, b, scale, shift, w2):
        y = autograd.conv2d(x, w, b, 1, 1)
        c = y.shape[1]
        y = autograd.batchnorm_2d(
            y,
            scale,
            shift,
            tensor.zeros((c,), x.device, x.dtype),
            tensor.ones((c,), x.device, x.dtype),
        )
        y = autograd.pooling_2d(autograd.sigmoid(y), 2, 2, 0, is_max=False)
        y = autograd.matmul(autograd.flatten(y), w2)
        return autograd.softmax_cross_entropy(y, tensor.from_numpy(labels, x.device))

    check_gradients(
        net,
        randn(2, 1, 4, 4),
        randn(2, 1, 3, 3),
        randn(2),
        randn(2),
        randn(2),
        randn(8, 2),
        rtol=1e-5,
    )


@pytest.mark.parametrize("size", [5, 2])
def test_lrn(size):
    # alpha large enough that the normalisation is far from the identity; an even size checks
    # the asymmetric window's transpose.
    check_gradients(
        lambda x: autograd.lrn(x, size=size, alpha=0.5, beta=0.75, k=1.0), randn(2, 6, 2, 3) * 2
    )
    with pytest.raises(ValueError, match="N, C, H, W"):
        autograd.lrn(tensor.from_numpy(randn(2, 6)), size=size)
