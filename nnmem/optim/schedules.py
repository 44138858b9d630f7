"""Hyperparameters that change with the step count: SINGA's DecayScheduler (Constant,
ExponentialDecay), and Hyperparameter, the descriptor through which an optimizer holds each
setting (learning rate, momentum, weight decay, ...).

Contract: a hyperparameter is a real number or a schedule of the step count. It is checked
when it is set, so that no update can fail on it half-way through a commit. The update kernels
evaluate a schedule themselves, at the count they read from the device (kernel_value gives
them the tuple they evaluate): a replayed graph follows the schedule without the host reading
the count.
"""

import math
import numbers

from nnmem.tensor import Tensor, to_numpy


class DecayScheduler:
    """A hyperparameter that changes with the step count s (the steps finished, SINGA's
    step_counter): value(s) = init_value * decay_rate ** e, with e = s / decay_steps, or
    floor(s / decay_steps) for a staircase.

    The update kernels evaluate it on the device, at the count they read there, from the tuple
    schedule() gives; a scheduler that is not of that form (SINGA lets a subclass compute any
    call(step)) cannot be evaluated there, and optimizers refuse it."""

    def __init__(self, init_value):
        self.init_value = float(init_value)

    def schedule(self):
        """(init_value, decay_rate, decay_steps, staircase): what the update kernels evaluate."""
        raise TypeError(
            f"{type(self).__name__}: the update kernels evaluate a schedule on the device as "
            "init_value * decay_rate ** (step / decay_steps); subclass Constant or "
            "ExponentialDecay and give its parameters"
        )

    def __call__(self, step):
        """The value after `step` finished steps. As SINGA's: given its step counter (a
        1-element tensor), a 1-element float32 tensor on the same device; given a number, a
        float."""
        if isinstance(step, Tensor):
            value = self._at(to_numpy(step).reshape(-1)[0])
            return Tensor((1,), step.device, requires_grad=False).set_value(value)
        return self._at(step)

    def _at(self, step):
        init, rate, period, staircase = self.schedule()
        e = step / period
        if staircase:
            e = math.floor(e)
        return float(init * rate**e)


class Constant(DecayScheduler):
    """value(s) = init_value at every step."""

    def schedule(self):
        return (self.init_value, 1.0, 1.0, False)


class ExponentialDecay(DecayScheduler):
    """value(s) = init_value * decay_rate ** (s / decay_steps); with staircase,
    init_value * decay_rate ** floor(s / decay_steps) (a drop every decay_steps steps)."""

    def __init__(self, init_value, decay_steps, decay_rate, staircase=False):
        super().__init__(init_value)
        if not decay_steps > 0:
            raise ValueError(f"ExponentialDecay: decay_steps must be > 0, got {decay_steps}")
        if not decay_rate >= 0:
            raise ValueError(f"ExponentialDecay: decay_rate must be >= 0, got {decay_rate}")
        self.decay_steps, self.decay_rate = float(decay_steps), float(decay_rate)
        self.staircase = bool(staircase)

    def schedule(self):
        return (self.init_value, self.decay_rate, self.decay_steps, self.staircase)


class Hyperparameter:
    """An optimizer setting the update kernels read when they run: a real number, or a
    DecayScheduler they evaluate at the step count. Checked when it is set, so that no update
    can fail on it half-way through a commit."""

    def __init__(self, decay_rate=False, non_negative=False):
        self.decay_rate = decay_rate  # a moving average's decay (beta, rho): in [0, 1)
        self.non_negative = non_negative  # epsilon: a negative one divides by zero or less

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, optimizer, owner=None):
        return self if optimizer is None else optimizer.__dict__[self.name]

    def __set__(self, optimizer, value):
        if isinstance(value, DecayScheduler):
            first = value.schedule()[0]  # raises for a scheduler the kernels cannot evaluate
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            value = first = float(value)
        else:
            raise TypeError(
                f"{type(optimizer).__name__}: {self.name} must be a number or a DecayScheduler "
                f"(Constant, ExponentialDecay), not {type(value).__name__}"
            )
        problem = None
        if not math.isfinite(first):  # every parameter would become NaN at the first step
            problem = "a finite number"
        elif self.decay_rate and not 0 <= first < 1:
            problem = "in [0, 1) (the decay of a moving average; at 1 Adam divides by 0)"
        elif self.non_negative and first < 0:
            problem = "0 or more"
        if problem:
            raise ValueError(
                f"{type(optimizer).__name__}: {self.name} must be {problem}, not {first}"
            )
        optimizer.__dict__[self.name] = value


def kernel_value(value):
    """A hyperparameter as the kernels take it: a number, or (init, rate, period, staircase)."""
    return value.schedule() if isinstance(value, DecayScheduler) else value


def initial_value(value):
    """A hyperparameter's value before the first step."""
    return value.init_value if isinstance(value, DecayScheduler) else value
