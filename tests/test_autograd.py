"""backward(): iterative, yields gradients as soon as they are final, frees saved tensors."""

import numpy as np
import pytest

from nnmem import autograd, device, layer, tensor


def param(dev, a):
    return tensor.Tensor(
        np.shape(a), dev, tensor.float64, requires_grad=True, stores_grad=True
    ).copy_from_numpy(np.asarray(a, np.float64))


def test_a_1000_layer_chain_does_not_recurse():
    dev = device.create_cpu_device("16MiB")
    autograd.training = True
    x = param(dev, np.ones(4))
    y = x
    for _ in range(1000):
        y = autograd.mul(y, 1.001)
    grads = dict(autograd.backward(y))
    np.testing.assert_allclose(tensor.to_numpy(grads[x]), np.full(4, 1.001**1000))


def test_gradients_are_yielded_as_soon_as_final():
    """The last layer's parameters arrive before the first layer's backward has even run."""
    dev = device.create_cpu_device("16MiB")
    autograd.training = True
    w1, w2 = param(dev, np.ones((3, 3))), param(dev, np.ones((3, 2)))
    x = tensor.from_numpy(np.ones((1, 3)), dev)
    h = autograd.matmul(x, w1)
    first_op = h.creator
    y = autograd.matmul(autograd.relu(h), w2)
    order = []
    for p, g in autograd.backward(y, tensor.from_numpy(np.ones((1, 2)), dev)):
        order.append(p)
        if p is w2:
            assert first_op.saved, "w1's operator has not run backward yet"
    assert order == [w2, w1]
    assert first_op.saved == ()


def test_saved_activations_are_freed_during_backward():
    """After backward, only parameters and the gradients still held remain allocated."""
    dev = device.create_cpu_device("64MiB")
    autograd.training = True
    w = [param(dev, np.random.default_rng(i).standard_normal((256, 256))) for i in range(4)]
    params_bytes = dev.memory_stats()["allocated_bytes.current"]
    x = tensor.from_numpy(np.ones((64, 256)), dev)
    y = x
    for wi in w:
        y = autograd.relu(autograd.matmul(y, wi))
    loss = autograd.mse_loss(y, tensor.zeros(y.shape, dev, tensor.float64))
    del y
    activations = dev.memory_stats()["allocated_bytes.current"] - params_bytes
    # Exactly what backward needs: the batch, the 4 ReLU outputs (each also the next matmul's
    # saved input), the MSE error and the 256-byte loss. The matmul outputs are already gone:
    # no backward reads them.
    assert activations == 6 * 64 * 256 * 8 + 256
    for p, g in autograd.backward(loss):
        del g  # the optimizer would consume and drop it here
    del loss
    left = dev.memory_stats()["allocated_bytes.current"] - params_bytes
    assert left == dev.pool.size_of(x.block.offset), "only the input batch remains"


def test_backward_without_training_mode_is_explained():
    dev = device.create_cpu_device("1MiB")
    autograd.training = False
    y = autograd.relu(param(dev, np.ones(2)))
    with pytest.raises(ValueError, match="model.train"):
        list(autograd.backward(y))


def test_inference_keeps_nothing_for_backward():
    dev = device.create_cpu_device("16MiB")
    autograd.training = False
    net = layer.Linear(4, 8)
    x = tensor.from_numpy(np.ones((2, 4), np.float32), dev)
    y = net(x)
    assert y.creator is None
