"""Optimiser parameter updates over flat arrays (the caller passes ``p.reshape(-1)``).

One thread per element: element i of the parameter is updated from element i of the gradient and of
the state buffers only, so the kernels are bit-identical on every call and coalesced. Updates happen
in place; ``grad`` is only read. No kernel allocates or needs a workspace beyond the optimiser state
(``buf`` for SGD momentum, ``m`` and ``v`` for Adam, ``avg`` for RMSProp, ``hist`` for AdaGrad),
which the caller owns and zeroes before the first step. float16 parameters, gradients and state are
widened as they are read; the update is computed in float64 (the hyperparameters' precision), as for
float32, and rounded once into each element stored.

The step number lives on the device (``steps``, int32, 1 element: the steps already finished),
and the kernels read it there: a replayed graph runs with no host in the loop, so the host can
neither read the count nor pass it as a scalar. Every thread reads steps[0]; no thread writes
it. The caller advances it with ``increment(steps)`` once the step's updates have been queued
(one counter can serve every parameter of an optimiser).

Hyperparameters (learning rate, momentum, ...) are numbers or *decay schedules*: a tuple
``(init, rate, period, staircase)`` whose value after s finished steps is
``init * rate ** (s / period)``, with ``floor(s / period)`` as the exponent when ``staircase``
(SINGA's ExponentialDecay; rate 1 is SINGA's Constant). The host functions pass every
hyperparameter to the kernels as a schedule (a number x as the constant (x, 1, 1, False)), so
each kernel has one signature per float type, and each thread evaluates the schedules at
steps[0]: what a replayed graph launches stays the same while the values follow the step.
"""

import math

from numba import cuda

from ._launch import (
    A1,
    check_device,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)

#: A hyperparameter as the kernels take it: (init, rate, period, staircase).
_SCHEDULE = "Tuple((float64, float64, float64, boolean))"
_STEPS = "int32[::1]"


def _check(name, **arrays):
    check_device(name, ndim=1, **arrays)
    float_dtype(name, **arrays)
    if len({a.size for a in arrays.values()}) > 1:
        raise ValueError(f"{name}: param, grad and state buffers must have the same size")


def _check_steps(name, steps):
    check_device(name, ndim=1, steps=steps)
    if steps.dtype.name != "int32":
        raise TypeError(f"{name}: steps must be an int32 array, not {steps.dtype}")
    if steps.size != 1:  # the CPU's error type
        raise ValueError(f"{name}: steps must hold one number (the steps finished)")


def _schedule(name, label, h):
    """Hyperparameter `h` (a number or an (init, rate, period, staircase) schedule) as the
    kernels take it: a schedule of Python floats and a bool (a number is a constant)."""
    if not isinstance(h, tuple):
        return (float(h), 1.0, 1.0, False)
    if len(h) != 4:
        raise ValueError(f"{name}: {label} must be a number or (init, rate, period, staircase)")
    init, rate, period, staircase = h
    return (float(init), float(rate), float(period), bool(staircase))


@device_function
def _at_step(h, s):
    """The value of schedule h = (init, rate, period, staircase) after s finished steps:
    init * rate ** e, e = s / period, or floor(s / period) when staircase."""
    init, rate, period, staircase = h
    if rate == 1.0:  # a constant: no pow for every thread to compute
        return init
    e = s / period
    if staircase:
        e = math.floor(e)
    return init * rate**e


_SGD = f"void({A1}, {A1}, {A1}, {_SCHEDULE}, {_SCHEDULE}, {_SCHEDULE}, {_SCHEDULE}, boolean, "


@kernel(*each_float(_SGD + f"{_STEPS})"), *each_float(_SGD + "none)"))
def _sgd_kernel(param, grad, buf, lr, momentum, dampening, weight_decay, nesterov, steps):
    """Thread i: element i of param (and of buf, when momentum starts non-zero); steps may be
    None (the hyperparameters are then read at step 0)."""
    i = cuda.grid(1)
    if i < param.size:
        s = 0 if steps is None else steps[0]
        wd = _at_step(weight_decay, s)
        g = widen(grad[i]) + wd * widen(param[i])
        if momentum[0] != 0:
            mom = _at_step(momentum, s)
            bi = mom * widen(buf[i]) + (1.0 - _at_step(dampening, s)) * g
            buf[i] = bi
            if nesterov:
                g = g + mom * bi
            else:
                g = bi
        param[i] = widen(param[i]) - _at_step(lr, s) * g


_HYPER5 = ", ".join([_SCHEDULE] * 5)  # lr, beta1, beta2, eps, weight_decay


@kernel(*each_float(f"void({A1}, {A1}, {A1}, {A1}, {_STEPS}, {_HYPER5})"))
def _adam_kernel(param, grad, m, v, steps, lr, beta1, beta2, eps, weight_decay):
    """Thread i: element i of param, m, v, with step = steps[0] + 1 read on the device."""
    i = cuda.grid(1)
    if i < param.size:
        s = steps[0]
        b1, b2 = _at_step(beta1, s), _at_step(beta2, s)
        c1 = 1.0 - b1 ** (s + 1)
        c2 = 1.0 - b2 ** (s + 1)
        g = widen(grad[i]) + _at_step(weight_decay, s) * widen(param[i])
        mi = b1 * widen(m[i]) + (1.0 - b1) * g
        vi = b2 * widen(v[i]) + (1.0 - b2) * g * g
        m[i] = mi
        v[i] = vi
        param[i] = widen(param[i]) - _at_step(lr, s) * (mi / c1) / (
            math.sqrt(vi / c2) + _at_step(eps, s)
        )


_HYPER4 = ", ".join([_SCHEDULE] * 4)  # lr, rho, eps, weight_decay


@kernel(*each_float(f"void({A1}, {A1}, {A1}, {_STEPS}, {_HYPER4})"))
def _rmsprop_kernel(param, grad, avg, steps, lr, rho, eps, weight_decay):
    """Thread i: element i of param and avg, the hyperparameters read at steps[0]."""
    i = cuda.grid(1)
    if i < param.size:
        s = steps[0]
        rho_s = _at_step(rho, s)
        g = widen(grad[i]) + _at_step(weight_decay, s) * widen(param[i])
        ai = rho_s * widen(avg[i]) + (1.0 - rho_s) * g * g
        avg[i] = ai
        param[i] = widen(param[i]) - _at_step(lr, s) * g / math.sqrt(ai + _at_step(eps, s))


_HYPER3 = ", ".join([_SCHEDULE] * 3)  # lr, eps, weight_decay


@kernel(*each_float(f"void({A1}, {A1}, {A1}, {_STEPS}, {_HYPER3})"))
def _adagrad_kernel(param, grad, hist, steps, lr, eps, weight_decay):
    """Thread i: element i of param and hist, the hyperparameters read at steps[0]."""
    i = cuda.grid(1)
    if i < param.size:
        s = steps[0]
        g = widen(grad[i]) + _at_step(weight_decay, s) * widen(param[i])
        hi = widen(hist[i]) + g * g
        hist[i] = hi
        param[i] = widen(param[i]) - _at_step(lr, s) * g / math.sqrt(hi + _at_step(eps, s))


def _schedules(name, **hyper):
    return tuple(_schedule(name, label, h) for label, h in hyper.items())


def sgd_update(
    param, grad, buf, lr, momentum, dampening, weight_decay, nesterov, steps=None, *, stream=0
):
    """SINGA SGD: g = grad + wd*param; if momentum: buf = momentum*buf + (1-dampening)*g,
    g = g + momentum*buf (nesterov) or buf; param -= lr*g.
    Momentum is used when its initial value is not 0 (SINGA's test: a schedule that starts at 0
    stays 0); buf is not touched otherwise. Hyperparameters are read at s = steps[0]; without
    `steps`, at s = 0. Updates param (and buf); grad unchanged."""
    hyper = _schedules(
        "sgd_update", lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay
    )
    if hyper[1][0] != 0:
        _check("sgd_update", param=param, grad=grad, buf=buf)
    else:
        _check("sgd_update", param=param, grad=grad)
        buf = param  # any array of param's type: the kernel never touches it
    if steps is not None:
        _check_steps("sgd_update", steps)
    launch_1d(_sgd_kernel, param.size, stream, param, grad, buf, *hyper, bool(nesterov), steps)


def adam_update(param, grad, m, v, steps, lr, beta1, beta2, eps, weight_decay, *, stream=0):
    """Adam, with step = s + 1 and the hyperparameters read at s = steps[0] on the device
    (steps: int32, 1 element, the steps already finished; not advanced here):
    g = grad + wd*param; m = b1*m + (1-b1)g; v = b2*v + (1-b2)g^2;
    param -= lr * (m/(1-b1^step)) / (sqrt(v/(1-b2^step)) + eps). Updates param, m, v."""
    _check("adam_update", param=param, grad=grad, m=m, v=v)
    _check_steps("adam_update", steps)
    hyper = _schedules(
        "adam_update", lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay
    )
    launch_1d(_adam_kernel, param.size, stream, param, grad, m, v, steps, *hyper)


def rmsprop_update(param, grad, avg, steps, lr, rho, eps, weight_decay, *, stream=0):
    """SINGA RMSProp, the hyperparameters read at s = steps[0] on the device: g = grad +
    wd*param; avg = rho*avg + (1-rho)*g^2; param -= lr * g / sqrt(avg + eps) (eps under the
    square root, as SINGA has it). Updates param, avg; steps is only read."""
    _check("rmsprop_update", param=param, grad=grad, avg=avg)
    _check_steps("rmsprop_update", steps)
    hyper = _schedules("rmsprop_update", lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
    launch_1d(_rmsprop_kernel, param.size, stream, param, grad, avg, steps, *hyper)


def adagrad_update(param, grad, hist, steps, lr, eps, weight_decay, *, stream=0):
    """SINGA AdaGrad, the hyperparameters read at s = steps[0] on the device: g = grad +
    wd*param; hist += g^2; param -= lr * g / sqrt(hist + eps). Updates param, hist; steps is
    only read."""
    _check("adagrad_update", param=param, grad=grad, hist=hist)
    _check_steps("adagrad_update", steps)
    hyper = _schedules("adagrad_update", lr=lr, eps=eps, weight_decay=weight_decay)
    launch_1d(_adagrad_kernel, param.size, stream, param, grad, hist, steps, *hyper)
