"""Optimizers: SINGA's update rules against NumPy references, state keyed by identity."""

import numpy as np
import pytest

from nnmem import device, opt, tensor


def sgd_reference(w, grads, lr, momentum, dampening, weight_decay, nesterov):
    buf = np.zeros_like(w)
    for g in grads:
        g = g + weight_decay * w
        if momentum:
            buf = momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
    return w


def adam_reference(w, grads, lr, b1, b2, eps, weight_decay):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        g = g + weight_decay * w
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return w


def run(optimizer, w0, grads):
    dev = device.create_cpu_device("1MiB")
    p = tensor.Tensor(w0.shape, dev, tensor.float64, requires_grad=True, stores_grad=True)
    p.copy_from_numpy(w0)
    for g in grads:
        optimizer.apply("w", p, tensor.from_numpy(g, dev))
        optimizer.step()
    return tensor.to_numpy(p)


rng = np.random.default_rng(3)
W0 = rng.standard_normal((4, 3))
GRADS = [rng.standard_normal((4, 3)) for _ in range(4)]


@pytest.mark.parametrize(
    "momentum,dampening,weight_decay,nesterov",
    [
        (0.0, 0.0, 0.0, False),
        (0.9, 0.0, 1e-2, False),
        (0.9, 0.1, 0.0, False),
        (0.8, 0.0, 1e-3, True),
    ],
)
def test_sgd_matches_singa_rule(momentum, dampening, weight_decay, nesterov):
    sgd = opt.SGD(
        lr=0.05,
        momentum=momentum,
        dampening=dampening,
        weight_decay=weight_decay,
        nesterov=nesterov,
    )
    np.testing.assert_allclose(
        run(sgd, W0, GRADS),
        sgd_reference(W0, GRADS, 0.05, momentum, dampening, weight_decay, nesterov),
        rtol=1e-12,
    )


def test_adam_matches_reference():
    adam = opt.Adam(lr=0.01, weight_decay=1e-3)
    np.testing.assert_allclose(
        run(adam, W0, GRADS), adam_reference(W0, GRADS, 0.01, 0.9, 0.999, 1e-8, 1e-3), rtol=1e-10
    )


def test_state_is_keyed_by_parameter_identity_not_name():
    dev = device.create_cpu_device("1MiB")
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    a = tensor.from_numpy(np.zeros(2), dev)
    b = tensor.from_numpy(np.zeros(2), dev)
    sgd.apply("same", a, tensor.from_numpy(np.ones(2), dev))
    sgd.apply("same", b, tensor.from_numpy(-np.ones(2), dev))
    assert len(sgd.moments) == 2
    np.testing.assert_allclose(tensor.to_numpy(a), -0.1)
    np.testing.assert_allclose(tensor.to_numpy(b), 0.1)


def test_nesterov_needs_momentum():
    with pytest.raises(ValueError, match="nesterov"):
        opt.SGD(lr=0.1, nesterov=True)


def test_optimizer_state_is_named_in_out_of_memory_reports():
    from nnmem.memory import OutOfMemory

    dev = device.create_cpu_device(4096)
    w = tensor.Tensor((256,), dev, requires_grad=True, stores_grad=True, name="fc.W")
    w.set_value(1.0)
    sgd = opt.SGD(lr=0.1, momentum=0.9)
    sgd.state_of(w)
    with pytest.raises(OutOfMemory) as e:
        tensor.Tensor((4096,), dev).set_value(0)
    assert "SGD momentum of fc.W (256,) float32" in str(e.value)
