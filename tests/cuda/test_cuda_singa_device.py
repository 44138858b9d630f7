"""SINGA's extra operators on the CUDA device (the simulator here) against the CPU device: a
forward and backward that goes through every new kernel family, with the values and gradients
of the CPU's, and float16 tensors computed in float32."""

import numpy as np
import pytest
from cuda_testutil import needs_device

from nnmem import autograd, device, layer, tensor

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]


def run(dev):
    """A little of everything: embedding, grouped conv, broadcasts, pointwise functions,
    softmax, transpose, slicing, padding, batched matmul, reductions and an LSTM step."""
    autograd.training = True
    try:
        rng = np.random.default_rng(0)
        dev.SetRandSeed(0)

        def param(*shape):
            t = tensor.Tensor(shape, dev, requires_grad=True, stores_grad=True)
            return t.copy_from_numpy(rng.standard_normal(shape).astype(np.float32) * 0.5)

        ids = tensor.Tensor((2, 3), dev, tensor.int32).copy_from_numpy(
            np.array([[0, 2, 2], [1, 0, 3]])
        )
        table, w, scale = param(4, 6), param(4, 1, 3, 3), param(1, 6)
        x = autograd.embedding(ids, table)  # (2, 3, 6)
        x = autograd.tanh(autograd.mul(x, scale)) + 0.5  # broadcast, pointwise, scalar
        att = autograd.softmax(autograd.matmul(x, autograd.transpose(x, (0, 2, 1))), axis=-1)
        y = autograd.matmul(att, x)  # batched (2, 3, 6)
        image = autograd.pad(
            autograd.reshape(y, (2, 2, 3, 3)), "constant", [0, 0, 1, 1, 0, 0, 1, 1]
        )
        z = autograd.conv2d(image, w, None, 1, 0, "direct", 2)  # grouped: (2, 4, 3, 3)
        z = autograd.elu(z[:, 1:3], 0.5)
        lstm = layer.LSTM(6, 4)
        h0 = tensor.zeros((2, 4), dev)
        hs, _, _ = lstm([y[:, 0].reshape((2, 6)), y[:, 2].reshape((2, 6))], (h0, h0))
        loss = autograd.reduce_mean(z) + autograd.reduce_sum(autograd.cat(hs, 1), keepdims=False)
        grads = autograd.gradients(loss)
        return tensor.to_numpy(loss), [tensor.to_numpy(grads[p]) for p in (table, w, scale)]
    finally:
        autograd.training = False


def test_the_cuda_device_computes_what_the_cpu_device_does():
    want_loss, want_grads = run(device.create_cpu_device("64MiB"))
    got_loss, got_grads = run(device.create_cuda_gpu("64MiB"))
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5, atol=1e-6)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_float16_works_on_the_cuda_device():
    """The kernels take float16 arrays themselves: tanh in float32, rounded once to float16."""
    dev = device.create_cuda_gpu("1MiB")
    x = np.array([-2.0, -0.5, 0.25, 3.0], np.float16)
    got = tensor.to_numpy(autograd.tanh(tensor.from_numpy(x, dev)))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.tanh(x.astype(np.float32)).astype(np.float16))


def test_a_small_tensor_prints_its_values_read_from_the_gpu():
    dev = device.create_cuda_gpu("1MiB")
    loss = tensor.from_numpy(np.array([np.log(10)], np.float32), dev)
    assert repr(loss) == "Tensor([2.3026], dtype=float32, device=cuda:0)"
    assert repr(tensor.Tensor((2,), dev)) == (
        "Tensor(shape=(2,), dtype=float32, device=cuda:0, unwritten)"
    )
