"""Optimiser parameter updates over flat arrays (the caller passes ``p.reshape(-1)``).

Each element of the parameter is updated from the same element of the gradient
and state buffers only (no reduction), so results are bit-identical on every
call. The kernels are compiled serial: a parameter update is memory-bound and
takes well under a millisecond even for the 400k weights of the MNIST CNN's
first linear layer, less than waking the OpenMP pool would save. Updates happen
in place; ``grad`` is only read. No kernel allocates or needs a workspace beyond the optimiser state
(``buf`` for SGD momentum, ``m`` and ``v`` for Adam), which the caller owns and
zeroes before the first step.
"""

import math

from numba import prange

from ._jit import njit

__all__ = ["sgd_update", "adam_update"]


def _check(a, b):
    if a.size != b.size:
        raise ValueError("optimiser update: param, grad and state buffers must have the same size")


check = njit(cache=True)(_check)


def _sgd_update(param, grad, buf, lr, momentum, dampening, weight_decay, nesterov):
    """SINGA SGD: g = grad + wd*param; if momentum: buf = momentum*buf + (1-dampening)*g,
    g = g + momentum*buf (nesterov) or buf; param -= lr*g.
    Updates param (and buf); grad unchanged."""
    check(param, grad)
    if momentum != 0:
        check(param, buf)
    for i in prange(param.size):
        g = grad[i] + weight_decay * param[i]
        if momentum != 0:
            bi = momentum * buf[i] + (1.0 - dampening) * g
            buf[i] = bi
            if nesterov:
                g = g + momentum * bi
            else:
                g = bi
        param[i] -= lr * g


def _adam_update(param, grad, m, v, steps, lr, beta1, beta2, eps, weight_decay):
    """Adam: g = grad + wd*param; m = b1*m + (1-b1)g; v = b2*v + (1-b2)g^2;
    param -= lr * (m/(1-b1^step)) / (sqrt(v/(1-b2^step)) + eps), with step = steps[0] + 1.

    `steps` (1 element) counts the steps already taken; it is read here, by the kernel, so a GPU
    step never waits for the host to read it. Updates param, m, v; steps is only read."""
    check(param, grad)
    check(param, m)
    check(param, v)
    step = steps[0] + 1
    if step < 1:
        raise ValueError("adam_update: the step count must not be negative")
    c1 = 1.0 - beta1**step
    c2 = 1.0 - beta2**step
    for i in prange(param.size):
        g = grad[i] + weight_decay * param[i]
        mi = beta1 * m[i] + (1.0 - beta1) * g
        vi = beta2 * v[i] + (1.0 - beta2) * g * g
        m[i] = mi
        v[i] = vi
        param[i] -= lr * (mi / c1) / (math.sqrt(vi / c2) + eps)


sgd_update = njit(cache=True)(_sgd_update)
adam_update = njit(cache=True)(_adam_update)
