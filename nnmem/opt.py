"""Optimizers with SINGA's update rules. ``optimizer(loss)`` runs a step in two phases:

1. compute: backward yields every parameter's gradient; the optimizer state that the updates
   need (momentum buffers, Adam moments, the step counter) is allocated;
2. commit: every parameter is updated in place, with Ctrl-C held back until all are.

Anything that fails in phase 1 (out of memory, an interrupt, a bad label) leaves parameters
and optimizer state exactly as they were; phase 2 allocates nothing, so it cannot run out of
memory half-way. The price is memory: every gradient stays alive until backward has ended
(at most one more copy of the parameters at the end of backward), where applying each update
as soon as its gradient is final could drop it at once.

State (momentum buffers, Adam moments) is keyed by the parameter tensor itself, not by its
name, so two layers that happen to share a name cannot share a buffer. The step count is a
tensor too, advanced by a device operation, and the hyperparameters (learning rate, momentum,
weight decay, ...) are read when the update runs: a replayed graph sees them change.
"""

import numbers

import numpy as np

from nnmem import autograd
from nnmem.tensor import Tensor, to_numpy


class Optimizer:
    def __init__(self, lr):
        self.lr = float(lr)
        self._steps = None  # a 1-element int32 tensor on the parameters' device
        self.moments = {}  # parameter tensor -> its state (see state_of)

    def __call__(self, loss):
        """Backward from `loss`, then update every parameter and advance the step counter;
        all of it or (when backward or an allocation fails) none of it."""
        gradients = list(autograd.backward(loss))
        self._allocate_state([param for param, _ in gradients], loss.device)
        with loss.device.commit_phase():
            for param, grad in gradients:
                self.apply(param.name, param, grad)
            self.step()

    def _allocate_state(self, params, device):
        """Create the step counter and every parameter's state before any update runs; if an
        allocation fails, forget the state made here, so the optimizer is as it was."""
        mark = self.state_mark()
        try:
            self._step_tensor(device)
            for param in params:
                self.state_of(param)
        except BaseException:
            self.forget_state_since(mark)
            raise

    def hyperparameters(self):
        """(name, value) of every number the update kernels are launched with (learning rate,
        momentum, betas...), sorted: what a step captured as one CUDA graph has frozen.
        An optimizer whose settings live elsewhere (a schedule) overrides it."""
        return tuple(sorted((k, v) for k, v in vars(self).items() if isinstance(v, numbers.Number)))

    def state_mark(self):
        """Which state exists now; forget_state_since(mark) drops what was made after it."""
        return self._steps is not None, set(self.moments)

    def forget_state_since(self, mark):
        """Drop the step counter and parameter states made since `mark` (a failed step's):
        their memory goes back to the pool, and the next step makes them again, zeroed."""
        had_steps, known = mark
        if not had_steps:
            self._steps = None
        for param in set(self.moments) - known:
            del self.moments[param]

    def state_of(self, param):
        """The optimizer's state for `param` (made, zeroed, on first use); None if it has none."""
        return None

    backward_and_update = __call__

    @property
    def step_counter(self):
        """How many steps have been taken (SINGA's name)."""
        return 0 if self._steps is None else int(to_numpy(self._steps)[0])

    def apply(self, param_name, param_value, param_grad):
        raise NotImplementedError

    def step(self):
        if self._steps is not None:
            increment = self._steps.device.kernels.increment
            self._steps.device.exec(
                lambda steps_, _: increment(steps_),
                reads=(self._steps,),
                writes=(self._steps,),
                name=f"{type(self).__name__}:step count",
                phase="update",
            )

    def _step_tensor(self, device):
        if self._steps is None:  # a host write: persistent state, never part of a recorded step
            self._steps = Tensor(
                (1,),
                device,
                np.int32,
                requires_grad=False,
                name=f"{type(self).__name__} step counter",
            ).set_value(0)
        return self._steps


def _state_like(param, what):
    """A zeroed state tensor shaped like `param`, named for memory reports ("SGD momentum
    of conv1.W" rather than an anonymous tensor)."""
    return Tensor(
        param.shape, param.device, param.dtype, requires_grad=False, name=f"{what} of {param.name}"
    ).set_value(0)


def _flat(*arrays):
    return [a.reshape(-1) for a in arrays]


class SGD(Optimizer):
    """SINGA's SGD: g = grad + wd * w; buf = momentum * buf + (1 - dampening) * g (buf starts at
    zero); g = g + momentum * buf if nesterov else buf; w -= lr * g."""

    def __init__(self, lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(lr)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening = 0")
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.weight_decay, self.nesterov = float(weight_decay), bool(nesterov)

    def state_of(self, param):
        if param not in self.moments:
            self.moments[param] = _state_like(param, "SGD momentum")
        return self.moments[param]

    def apply(self, param_name, param_value, param_grad):
        p, g = param_value, param_grad
        buf = self.state_of(p)

        sgd_update = p.device.kernels.sgd_update

        def update(p_, buf_, _p, g_, _buf):  # hyperparameters read when it runs (replays too)
            sgd_update(
                *_flat(p_, g_, buf_),
                self.lr,
                self.momentum,
                self.dampening,
                self.weight_decay,
                self.nesterov,
            )

        p.device.exec(
            update,
            reads=(p, g, buf),
            writes=(p, buf),
            name=f"{param_name}:SGD update",
            phase="update",
        )


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; weight decay added to the gradient."""

    def __init__(self, lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr)
        self.beta_1, self.beta_2 = float(beta_1), float(beta_2)
        self.epsilon, self.weight_decay = float(epsilon), float(weight_decay)

    def state_of(self, param):
        if param not in self.moments:
            self.moments[param] = (_state_like(param, "Adam m"), _state_like(param, "Adam v"))
        return self.moments[param]

    def apply(self, param_name, param_value, param_grad):
        p, g = param_value, param_grad
        m, v = self.state_of(p)
        steps = self._step_tensor(p.device)

        adam_update = p.device.kernels.adam_update

        def update(p_, m_, v_, _p, g_, _m, _v, steps_):  # hyperparameters read when it runs
            adam_update(
                *_flat(p_, g_, m_, v_),
                steps_,  # the kernel reads the step count: the host never waits for it
                self.lr,
                self.beta_1,
                self.beta_2,
                self.epsilon,
                self.weight_decay,
            )

        p.device.exec(
            update,
            reads=(p, g, m, v, steps),
            writes=(p, m, v),
            name=f"{param_name}:Adam update",
            phase="update",
        )
