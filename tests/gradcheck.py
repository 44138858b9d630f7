"""Finite-difference gradient check for nnmem operators.

Every element of every input is perturbed (central differences, float64), and the output is
multiplied by a random cotangent before summing: a plain sum would hide transpose and
broadcast mistakes, because it weights every output element the same.
"""

import numpy as np

from nnmem import autograd, device, tensor


def check_gradients(fn, *arrays, eps=1e-6, rtol=1e-6, atol=1e-9, seed=0):
    """Compare autograd's gradients of sum(c * fn(*inputs)) with central differences.

    `fn` takes nnmem tensors (one per array) and returns one tensor. Randomness inside `fn`
    (dropout) is made repeatable by reseeding the device before every evaluation.
    """
    dev = device.create_cpu_device("64MiB")
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]

    def evaluate(values, keep_graph):
        autograd.training = True
        dev.SetRandSeed(seed)
        ts = [
            tensor.Tensor(
                a.shape, dev, tensor.float64, requires_grad=True, stores_grad=True
            ).copy_from_numpy(a)
            for a in values
        ]
        return ts, fn(*ts)

    inputs, y = evaluate(arrays, True)
    cotangent = np.random.default_rng(seed + 1).standard_normal(y.shape)
    grads = dict(autograd.backward(y, tensor.from_numpy(cotangent, dev)))
    analytic = [tensor.to_numpy(grads[t]) if t in grads else np.zeros(t.shape) for t in inputs]

    def objective(values):
        _, out = evaluate(values, False)
        return float((tensor.to_numpy(out) * cotangent).sum())

    for i, a in enumerate(arrays):
        numeric = np.zeros_like(a)
        for j in range(a.size):
            plus, minus = [v.copy() for v in arrays], [v.copy() for v in arrays]
            plus[i].reshape(-1)[j] += eps
            minus[i].reshape(-1)[j] -= eps
            numeric.reshape(-1)[j] = (objective(plus) - objective(minus)) / (2 * eps)
        np.testing.assert_allclose(
            analytic[i], numeric, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}"
        )
    return analytic


def forward_and_backward(dev, fn, arrays, cotangent):
    """fn's output and every input's gradient for the cotangent, as host arrays, on dev: what
    the tests of the CUDA kernels compare with the CPU's."""
    autograd.training = True
    ts = [
        tensor.Tensor(a.shape, dev, tensor.float64, requires_grad=True, stores_grad=True)
        for a in arrays
    ]
    for t, a in zip(ts, arrays):
        t.copy_from_numpy(a)
    y = fn(*ts)
    grads = dict(autograd.backward(y, tensor.from_numpy(cotangent, dev)))
    return [tensor.to_numpy(y)] + [tensor.to_numpy(grads[t]) for t in ts]
