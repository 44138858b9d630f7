"""Optimiser parameter updates over flat arrays (the caller passes ``p.reshape(-1)``).

Each element of the parameter is updated from the same element of the gradient
and state buffers only (no reduction), so results are bit-identical on every
call. A parameter update is memory-bound: serial for small parameters, on every
thread from ``_jit.PARALLEL_FROM`` elements (the 400k weights of the MNIST CNN's
first linear layer took 0.5 ms serial on a 16-core machine, at any thread count:
``_jit.by_size`` says more). Updates happen in place; ``grad`` is only read. No kernel
allocates or needs a workspace beyond the optimiser state (``buf`` for SGD momentum, ``m``
and ``v`` for Adam, ``avg`` for RMSProp, ``hist`` for AdaGrad), which the caller owns and
zeroes before the first step.

Hyperparameters (learning rate, momentum, ...) are numbers or *decay schedules*: a tuple
``(init, rate, period, staircase)`` whose value after s finished steps is
``init * rate ** (s / period)``, with ``floor(s / period)`` as the exponent when ``staircase``
(SINGA's ExponentialDecay; rate 1 is SINGA's Constant). ``steps`` (int32, 1 element) holds s;
the kernel reads it, so a replayed step follows the schedule with no host in the loop, and
never writes it (the caller advances it once all of a step's updates are queued).
"""

import math

from numba import prange

from ._jit import by_size, njit


def _check(a, b):
    if a.size != b.size:
        raise ValueError("optimiser update: param, grad and state buffers must have the same size")


check = njit(cache=True)(_check)


def _finished(steps):
    """steps[0], the number of steps finished (0 when there is no counter: steps is None)."""
    if steps is None:
        return 0
    if steps.size != 1:
        raise ValueError("optimiser update: steps must hold one number (the steps finished)")
    if steps[0] < 0:
        raise ValueError("optimiser update: the step count must not be negative")
    return steps[0]


finished = njit(cache=True)(_finished)


def _at_step(h, s):
    """The value of hyperparameter `h` after `s` finished steps: `h` itself for a number;
    init * rate ** e for a schedule (init, rate, period, staircase), e = s / period, or
    floor(s / period) when staircase. (A constant schedule, rate 1, is exactly init:
    1 ** e == 1.)"""
    if isinstance(h, tuple):
        init, rate, period, staircase = h
        e = s / period
        if staircase:
            e = math.floor(e)
        return init * rate**e
    return h


at_step = njit(cache=True)(_at_step)


def _initial(h):
    """The value of hyperparameter `h` before the first step (a schedule's init)."""
    if isinstance(h, tuple):
        return h[0]
    return h


initial = njit(cache=True)(_initial)


def _sgd_update(param, grad, buf, lr, momentum, dampening, weight_decay, nesterov, steps=None):
    """SINGA SGD: g = grad + wd*param; if momentum: buf = momentum*buf + (1-dampening)*g,
    g = g + momentum*buf (nesterov) or buf; param -= lr*g.
    Momentum is used when its initial value is not 0 (SINGA's test: a schedule that starts at 0
    stays 0). Hyperparameters are read at s = steps[0]; without `steps`, at s = 0.
    Updates param (and buf); grad unchanged."""
    check(param, grad)
    with_momentum = initial(momentum) != 0
    if with_momentum:
        check(param, buf)
    s = finished(steps)
    lr_s, mom_s = at_step(lr, s), at_step(momentum, s)
    damp_s, wd_s = at_step(dampening, s), at_step(weight_decay, s)
    for i in prange(param.size):
        g = grad[i] + wd_s * param[i]
        if with_momentum:
            bi = mom_s * buf[i] + (1.0 - damp_s) * g
            buf[i] = bi
            if nesterov:
                g = g + mom_s * bi
            else:
                g = bi
        param[i] -= lr_s * g


def _adam_update(param, grad, m, v, steps, lr, beta1, beta2, eps, weight_decay):
    """Adam: g = grad + wd*param; m = b1*m + (1-b1)g; v = b2*v + (1-b2)g^2;
    param -= lr * (m/(1-b1^step)) / (sqrt(v/(1-b2^step)) + eps), with step = s + 1 and the
    hyperparameters read at s = steps[0]. Updates param, m, v; steps is only read."""
    check(param, grad)
    check(param, m)
    check(param, v)
    s = finished(steps)
    lr_s, b1, b2 = at_step(lr, s), at_step(beta1, s), at_step(beta2, s)
    eps_s, wd_s = at_step(eps, s), at_step(weight_decay, s)
    c1 = 1.0 - b1 ** (s + 1)
    c2 = 1.0 - b2 ** (s + 1)
    for i in prange(param.size):
        g = grad[i] + wd_s * param[i]
        mi = b1 * m[i] + (1.0 - b1) * g
        vi = b2 * v[i] + (1.0 - b2) * g * g
        m[i] = mi
        v[i] = vi
        param[i] -= lr_s * (mi / c1) / (math.sqrt(vi / c2) + eps_s)


def _rmsprop_update(param, grad, avg, steps, lr, rho, eps, weight_decay):
    """SINGA RMSProp: g = grad + wd*param; avg = rho*avg + (1-rho)*g^2;
    param -= lr * g / sqrt(avg + eps) (eps under the square root, as SINGA has it), with the
    hyperparameters read at s = steps[0]. Updates param, avg; steps is only read."""
    check(param, grad)
    check(param, avg)
    s = finished(steps)
    lr_s, rho_s = at_step(lr, s), at_step(rho, s)
    eps_s, wd_s = at_step(eps, s), at_step(weight_decay, s)
    for i in prange(param.size):
        g = grad[i] + wd_s * param[i]
        ai = rho_s * avg[i] + (1.0 - rho_s) * g * g
        avg[i] = ai
        param[i] -= lr_s * g / math.sqrt(ai + eps_s)


def _adagrad_update(param, grad, hist, steps, lr, eps, weight_decay):
    """SINGA AdaGrad: g = grad + wd*param; hist += g^2; param -= lr * g / sqrt(hist + eps),
    with the hyperparameters read at s = steps[0]. Updates param, hist; steps is only read."""
    check(param, grad)
    check(param, hist)
    s = finished(steps)
    lr_s, eps_s, wd_s = at_step(lr, s), at_step(eps, s), at_step(weight_decay, s)
    for i in prange(param.size):
        g = grad[i] + wd_s * param[i]
        hi = hist[i] + g * g
        hist[i] = hi
        param[i] -= lr_s * g / math.sqrt(hi + eps_s)


# serial for small parameters, on every thread for large ones (_jit.by_size says why)
sgd_update = by_size(_sgd_update)
adam_update = by_size(_adam_update)
rmsprop_update = by_size(_rmsprop_update)
adagrad_update = by_size(_adagrad_update)
