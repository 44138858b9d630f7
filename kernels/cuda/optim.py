"""Optimiser parameter updates over flat arrays (the caller passes ``p.reshape(-1)``).

One thread per element: element i of the parameter is updated from element i of the gradient
and of the state buffers only, so the kernels are bit-identical on every call and coalesced.
Updates happen in place; ``grad`` is only read. No kernel allocates or needs a workspace beyond
the optimiser state (``buf`` for SGD momentum, ``m`` and ``v`` for Adam), which the caller owns
and zeroes before the first step.

Adam's step number lives on the device (``steps``, int32, 1 element: the steps already
finished), and the kernel reads it there: a replayed graph runs with no host in the loop, so
the host can neither read the count nor pass it as a scalar. Every thread reads steps[0]; no
thread writes it. The caller advances it with ``increment(steps)`` once the step's updates have
been queued (one counter can serve every parameter of an optimiser).
"""

import math

from numba import cuda

from ._launch import A1, check_device, each_float, float_dtype, kernel, launch_1d

__all__ = ["sgd_update", "adam_update"]


def _check(name, **arrays):
    check_device(name, ndim=1, **arrays)
    float_dtype(name, **arrays)
    if len({a.size for a in arrays.values()}) > 1:
        raise ValueError(f"{name}: param, grad and state buffers must have the same size")


@kernel(*each_float(f"void({A1}, {A1}, {A1}, float64, float64, float64, float64, boolean)"))
def _sgd_kernel(param, grad, buf, lr, momentum, dampening, weight_decay, nesterov):
    """Thread i: element i of param (and of buf, when momentum != 0)."""
    i = cuda.grid(1)
    if i < param.size:
        g = grad[i] + weight_decay * param[i]
        if momentum != 0:
            bi = momentum * buf[i] + (1.0 - dampening) * g
            buf[i] = bi
            if nesterov:
                g = g + momentum * bi
            else:
                g = bi
        param[i] -= lr * g


_HYPER = "float64, float64, float64, float64, float64"  # lr, beta1, beta2, eps, weight_decay


@kernel(*each_float(f"void({A1}, {A1}, {A1}, {A1}, int32[::1], {_HYPER})"))
def _adam_kernel(param, grad, m, v, steps, lr, beta1, beta2, eps, weight_decay):
    """Thread i: element i of param, m, v, with step = steps[0] + 1 read on the device."""
    i = cuda.grid(1)
    if i < param.size:
        step = steps[0] + 1
        c1 = 1.0 - beta1**step
        c2 = 1.0 - beta2**step
        g = grad[i] + weight_decay * param[i]
        mi = beta1 * m[i] + (1.0 - beta1) * g
        vi = beta2 * v[i] + (1.0 - beta2) * g * g
        m[i] = mi
        v[i] = vi
        param[i] -= lr * (mi / c1) / (math.sqrt(vi / c2) + eps)


def sgd_update(param, grad, buf, lr, momentum, dampening, weight_decay, nesterov, *, stream=0):
    """SINGA SGD: g = grad + wd*param; if momentum: buf = momentum*buf + (1-dampening)*g,
    g = g + momentum*buf (nesterov) or buf; param -= lr*g.
    Updates param (and buf); grad unchanged. buf is not touched when momentum == 0."""
    if momentum != 0:
        _check("sgd_update", param=param, grad=grad, buf=buf)
    else:
        _check("sgd_update", param=param, grad=grad)
        buf = param  # any array of param's type: the kernel never touches it
    args = (float(lr), float(momentum), float(dampening), float(weight_decay), bool(nesterov))
    launch_1d(_sgd_kernel, param.size, stream, param, grad, buf, *args)


def adam_update(param, grad, m, v, steps, lr, beta1, beta2, eps, weight_decay, *, stream=0):
    """Adam, with step = steps[0] + 1 read on the device (steps: int32, 1 element, the steps
    already finished; not advanced here): g = grad + wd*param; m = b1*m + (1-b1)g;
    v = b2*v + (1-b2)g^2; param -= lr * (m/(1-b1^step)) / (sqrt(v/(1-b2^step)) + eps).
    Updates param, m, v."""
    _check("adam_update", param=param, grad=grad, m=m, v=v)
    check_device("adam_update", ndim=1, steps=steps)
    if steps.dtype.name != "int32" or steps.size != 1:
        raise TypeError("adam_update: steps must be a 1-element int32 array (steps finished)")
    args = (float(lr), float(beta1), float(beta2), float(eps), float(weight_decay))
    launch_1d(_adam_kernel, param.size, stream, param, grad, m, v, steps, *args)
