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

A hyperparameter is a number or a schedule (SINGA's DecayScheduler: Constant, ExponentialDecay)
of the step count. The update kernels evaluate a schedule themselves, at the count they read
from the device: a replayed graph follows the schedule without the host reading the count.
"""

import math
import numbers
from collections.abc import Mapping

import numpy as np

from nnmem import autograd
from nnmem.interrupts import deferred_interrupts
from nnmem.tensor import Tensor, float32, to_numpy

_INT32_MAX = 2**31 - 1
_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float16, np.float64))


# -- schedules -------------------------------------------------------------------------------
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
        """The value after `step` finished steps (a number, or a 1-element tensor such as
        SINGA's step counter), as a float (SINGA returns a 1-element tensor)."""
        if isinstance(step, Tensor):
            step = to_numpy(step).reshape(-1)[0]
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


class _Hyperparameter:
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


def _kernel_value(value):
    """A hyperparameter as the kernels take it: a number, or (init, rate, period, staircase)."""
    return value.schedule() if isinstance(value, DecayScheduler) else value


def _initial(value):
    """A hyperparameter's value before the first step."""
    return value.init_value if isinstance(value, DecayScheduler) else value


def _optimizer_dtype(owner, dtype):
    try:
        found = None if dtype is None else np.dtype(dtype)
    except TypeError:
        found = None
    if found is None or found not in _DTYPES:  # (a dtype compares equal to None: float64)
        raise TypeError(f"{owner}: dtype must be float32, float16 or float64, not {dtype!r}")
    return found


def _check_gradient_sizes(gradients):
    """ValueError unless every gradient has as many elements as its parameter. The update
    kernels refuse a mismatch too, but in the commit, after other parameters were updated: a
    half-applied step. An operator whose backward returns a wrong shape is the usual cause."""
    wrong = [
        f"{param.name} is {param.shape} but its gradient {grad.shape}"
        for param, grad in gradients
        if math.prod(grad.shape) != math.prod(param.shape)
    ]
    if wrong:
        raise ValueError(
            f"optimizer: gradients of another size than their parameters ({'; '.join(wrong)}); "
            "the backward of the operator that makes the gradient returns a wrong shape: fix it"
        )


# -- optimizers ------------------------------------------------------------------------------


class Optimizer:
    """The base: a learning rate (a number or a DecayScheduler), SINGA's dtype (stored: the
    parameters keep their own), the step counter and every parameter's state.

    _STATES lists a subclass's state tensors per parameter, (get_states' name for them, the
    name memory reports give them), in the order state_of returns them."""

    lr = _Hyperparameter()
    _STATES = ()

    def __init__(self, lr, dtype=float32):
        self.lr = lr
        self.dtype = _optimizer_dtype(type(self).__name__, dtype)
        self._steps = None  # a 1-element int32 tensor on the parameters' device
        self.moments = {}  # parameter tensor -> its state (see state_of)
        # What set_states gave for what does not exist yet: "step_counter" -> the count, and
        # state name -> {parameter name: array}, used when the counter / the state is made.
        self._restored = {}

    def __call__(self, loss):
        """Backward from `loss`, then update every parameter and advance the step counter;
        all of it or (when backward or an allocation fails) none of it."""
        self.apply_gradients(list(autograd.backward(loss)), loss.device)

    def apply_gradients(self, gradients, device, then=None):
        """The two phases for (parameter, gradient) pairs: make every state the updates
        need, then, in the commit phase, update every parameter, advance the step counter
        and call then() (a wrapper's own part of the commit: DistOpt's residuals)."""
        _check_gradient_sizes(gradients)  # here: an update kernel refusing one would cut the commit
        self._allocate_state([param for param, _ in gradients], device)
        with device.commit_phase():
            for param, grad in gradients:
                self.apply(param.name, param, grad)
            self.step()
            if then is not None:
                then()

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
        """(name, value) of every setting the update kernels are launched with (learning rate,
        momentum, betas...), sorted, a schedule as the tuple the kernels evaluate: what a step
        captured as one CUDA graph has frozen. (A schedule's values follow the step count on
        the device; only another schedule needs another capture.)"""
        found = []
        for name, value in vars(self).items():
            if isinstance(value, DecayScheduler):
                found.append((name, value.schedule()))
            elif isinstance(value, numbers.Number):
                found.append((name, value))
        return tuple(sorted(found))

    def state_mark(self):
        """Which state exists now; forget_state_since(mark) drops what was made after it."""
        restored = {k: dict(v) if isinstance(v, dict) else v for k, v in self._restored.items()}
        return self._steps is not None, set(self.moments), restored

    def forget_state_since(self, mark):
        """Drop the step counter and parameter states made since `mark` (a failed step's):
        their memory goes back to the pool, and the next step makes them again, from zeros or
        from what set_states gave (which is kept for it)."""
        had_steps, known, restored = mark
        if not had_steps:
            self._steps = None
        for param in set(self.moments) - known:
            del self.moments[param]
        self._restored = restored

    def state_of(self, param):
        """The optimizer's state for `param`: one tensor per entry of _STATES, alone or as a
        tuple (None for an optimizer without state). Made on first use: what set_states gave
        for the parameter's name, or zeros."""
        if not self._STATES:
            return None
        if param not in self.moments:
            made = tuple(self._new_state(param, kind, what) for kind, what in self._STATES)
            for kind, _ in self._STATES:  # now held by the tensors just made
                self._restored.get(kind, {}).pop(param.name, None)
            self.moments[param] = made if len(made) > 1 else made[0]
        return self.moments[param]

    def _new_state(self, param, kind, what):
        restored = self._restored.get(kind, {}).get(param.name)
        if restored is None:
            return _state_like(param, what).set_value(0)
        if restored.shape != param.shape:
            raise ValueError(
                f"{type(self).__name__}.set_states: {kind}[{param.name!r}] has shape "
                f"{restored.shape}, but the parameter {param.name} has shape {param.shape}"
            )
        state = _state_like(param, what)
        return state.copy_from_numpy(restored.astype(state.dtype, copy=False))

    backward_and_update = __call__

    @property
    def step_counter(self):
        """How many steps have been taken (SINGA's name)."""
        if self._steps is None:
            return self._restored.get("step_counter", 0)
        return int(to_numpy(self._steps)[0])

    def apply(self, param_name, param_value, param_grad):
        raise NotImplementedError

    def update(self, param, grad):
        """SINGA's: queue the update of one parameter by its gradient now (the step counter
        advances with step())."""
        self.apply(param.name, param, grad)

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
            ).set_value(self._restored.pop("step_counter", 0))
        return self._steps

    def _values(self, *names):
        """The named hyperparameters as the kernels take them, read now (when the update runs)."""
        return tuple(_kernel_value(getattr(self, name)) for name in names)

    def _queue_update(self, param_name, p, g, kernel_name, launch):
        """Queue the update of `p` by the kernel `kernel_name`: launch(kernel, p, g, *state,
        steps) runs when the update does (in a replay too), with flat arrays."""
        states = _as_tuple(self.state_of(p))
        steps = self._step_tensor(p.device)
        kernel = getattr(p.device.kernels, kernel_name)
        n = len(states)

        def update(p_, *arrays):  # writes: p, *states; reads: p, g, *states, steps
            launch(kernel, *_flat(p_, arrays[n + 1], *arrays[:n]), arrays[-1])

        p.device.exec(
            update,
            reads=(p, g, *states, steps),
            writes=(p, *states),
            name=f"{param_name}:{type(self).__name__} update",
            phase="update",
        )

    # -- SINGA's get_states / set_states ------------------------------------------------------
    def get_states(self):
        """SINGA's layout: {"step_counter": the steps taken, <state>: {parameter name: array}}
        with one <state> per state tensor ("moments" for SGD, "running_average" for RMSProp,
        "history" for AdaGrad, "m" and "v" for Adam). The arrays are NumPy copies, a snapshot
        (SINGA hands out its live tensors). What set_states gave for parameters not seen yet
        is in it as given, so set_states(get_states()) changes nothing."""
        named = self._named_states()
        states = {"step_counter": self.step_counter}
        for i, (kind, _) in enumerate(self._STATES):
            states[kind] = {name: to_numpy(_as_tuple(s)[i]) for name, s in named.items()}
            states[kind].update(self._restored.get(kind, {}))
        return states

    def set_states(self, states):
        """Set the step counter and the parameters' state from `states`, in get_states' layout
        (arrays or tensors of any real dtype, converted to the state's). All or nothing: every
        entry is checked before anything changes (a wrong name, shape or type raises and
        changes nothing). As SINGA's, a <state> given replaces that state of every parameter:
        a parameter it leaves out starts again from zeros; a <state> left out is kept.
        State for a parameter the optimizer has not seen yet (set before the first step) is
        used when the parameter first comes, its shape checked then."""
        owner = f"{type(self).__name__}.set_states"
        if not isinstance(states, Mapping):
            raise TypeError(f"{owner}: states must be a dict (get_states' layout)")
        kinds = [kind for kind, _ in self._STATES]
        unknown = [k for k in states if k != "step_counter" and k not in kinds]
        if unknown:
            raise ValueError(
                f"{owner}: unknown entries {unknown}; a {type(self).__name__}'s states are "
                f"{', '.join(['step_counter', *kinds])}"
            )
        if "step_counter" not in states:
            raise ValueError(f"{owner}: no step_counter")
        steps = _step_count(owner, states["step_counter"])
        named = self._named_states()
        given = {}
        for i, kind in enumerate(kinds):
            if kind not in states:
                continue
            if not isinstance(states[kind], Mapping):
                raise TypeError(f"{owner}: {kind} must be a dict {{parameter name: array}}")
            given[kind] = {}
            for name, value in states[kind].items():
                entry = f"{owner}: {kind}[{name!r}]"
                array = _state_array(entry, value)
                if name in named and array.shape != _as_tuple(named[name])[i].shape:
                    raise ValueError(
                        f"{entry} has shape {array.shape}, but that state has shape "
                        f"{_as_tuple(named[name])[i].shape}"
                    )
                given[kind][name] = array
        with deferred_interrupts():  # all checked: a Ctrl-C must not leave half of it set
            if self._steps is None:
                self._restored["step_counter"] = steps
            else:
                self._steps.set_value(steps)
            for i, kind in enumerate(kinds):
                if kind not in given:
                    continue
                for name, state in named.items():
                    tensor = _as_tuple(state)[i]
                    if name in given[kind]:
                        tensor.copy_from_numpy(given[kind][name].astype(tensor.dtype, copy=False))
                    else:
                        tensor.set_value(0)
                self._restored[kind] = {
                    name: a for name, a in given[kind].items() if name not in named
                }

    def _named_states(self):
        """{parameter name: state}: the names are get_states' keys, so a parameter without a
        name, or two sharing one, are refused."""
        named = {}
        for param, state in self.moments.items():
            if param.name is None:
                raise ValueError(
                    f"{type(self).__name__}: a parameter of shape {param.shape} has no name, and "
                    "states are keyed by name; name it (Model.compile names a model's)"
                )
            if param.name in named:
                raise ValueError(
                    f"{type(self).__name__}: two parameters are named {param.name!r}, and states "
                    "are keyed by name; rename one"
                )
            named[param.name] = state
        return named


def _step_count(owner, value):
    """set_states' step_counter (a number, or a 1-element array or tensor) as an int."""
    a = to_numpy(value) if isinstance(value, Tensor) else np.asarray(value)
    if a.size != 1 or a.dtype.kind not in "fiu":
        raise ValueError(f"{owner}: step_counter must be one number, got {value!r}")
    count = a.reshape(-1)[0]
    if not (np.isfinite(count) and count == int(count) and 0 <= count <= _INT32_MAX):
        raise ValueError(f"{owner}: step_counter must be a whole number from 0 to 2**31-1")
    return int(count)


def _state_array(entry, value):
    """A copy of `value` (a tensor or a NumPy array of real numbers): set_states may keep it."""
    if isinstance(value, Tensor):
        array = to_numpy(value)
    elif isinstance(value, np.ndarray):
        array = value.copy()
    else:
        raise TypeError(f"{entry} is a {type(value).__name__}, not a Tensor or a NumPy array")
    if array.dtype.kind not in "fiu":
        raise TypeError(f"{entry} has dtype {array.dtype}; optimizer state is real numbers")
    return array


def _state_like(param, what):
    """A state tensor shaped like `param` (not yet written), named for memory reports ("SGD
    momentum of conv1.W" rather than an anonymous tensor)."""
    return Tensor(
        param.shape, param.device, param.dtype, requires_grad=False, name=f"{what} of {param.name}"
    )


def _as_tuple(state):
    return state if isinstance(state, tuple) else (state,)


def _flat(*arrays):
    return [a.reshape(-1) for a in arrays]


def _not_negative(optimizer, *names):
    """SINGA refuses a negative momentum or weight decay (a schedule's, at its start)."""
    for name in names:
        if _initial(getattr(optimizer, name)) < 0:
            raise ValueError(f"{type(optimizer).__name__}: {name} must not be negative")


class SGD(Optimizer):
    """SINGA's SGD: g = grad + wd * w; buf = momentum * buf + (1 - dampening) * g (buf starts at
    zero); g = g + momentum * buf if nesterov else buf; w -= lr * g. Momentum is used when its
    initial value is not 0. Every hyperparameter may be a schedule; dtype is SINGA's (stored)."""

    momentum = _Hyperparameter()
    dampening = _Hyperparameter()
    weight_decay = _Hyperparameter()
    _STATES = (("moments", "SGD momentum"),)

    def __init__(
        self,
        lr=0.1,
        momentum=0.0,
        dampening=0.0,
        weight_decay=0.0,
        nesterov=False,
        dtype=float32,
    ):
        super().__init__(lr, dtype)
        self.momentum, self.dampening, self.weight_decay = momentum, dampening, weight_decay
        _not_negative(self, "momentum", "weight_decay")
        if nesterov and (_initial(self.momentum) <= 0 or _initial(self.dampening) != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening = 0")
        self.nesterov = bool(nesterov)

    def apply(self, param_name, param_value, param_grad):
        def launch(sgd_update, p_, g_, buf_, steps_):  # hyperparameters read when it runs
            hyper = self._values("lr", "momentum", "dampening", "weight_decay")
            sgd_update(p_, g_, buf_, *hyper, self.nesterov, steps_)

        self._queue_update(param_name, param_value, param_grad, "sgd_update", launch)


class RMSProp(Optimizer):
    """SINGA's RMSProp: g = grad + wd * w; avg = rho * avg + (1 - rho) * g^2 (avg starts at
    zero); w -= lr * g / sqrt(avg + epsilon) (epsilon under the square root, as in SINGA).
    Every hyperparameter may be a schedule."""

    rho = _Hyperparameter(decay_rate=True)
    epsilon = _Hyperparameter(non_negative=True)
    weight_decay = _Hyperparameter()
    _STATES = (("running_average", "RMSProp running average"),)

    def __init__(self, lr=0.1, rho=0.9, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr)
        self.rho, self.epsilon, self.weight_decay = rho, epsilon, weight_decay
        _not_negative(self, "weight_decay")

    def apply(self, param_name, param_value, param_grad):
        def launch(rmsprop_update, p_, g_, avg_, steps_):  # hyperparameters read when it runs
            rmsprop_update(
                p_, g_, avg_, steps_, *self._values("lr", "rho", "epsilon", "weight_decay")
            )

        self._queue_update(param_name, param_value, param_grad, "rmsprop_update", launch)


class AdaGrad(Optimizer):
    """SINGA's AdaGrad: g = grad + wd * w; history += g^2 (history starts at zero);
    w -= lr * g / sqrt(history + epsilon). Every hyperparameter may be a schedule."""

    epsilon = _Hyperparameter(non_negative=True)
    weight_decay = _Hyperparameter()
    _STATES = (("history", "AdaGrad history"),)

    def __init__(self, lr=0.1, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr)
        self.epsilon, self.weight_decay = epsilon, weight_decay
        _not_negative(self, "weight_decay")

    def apply(self, param_name, param_value, param_grad):
        def launch(adagrad_update, p_, g_, hist_, steps_):  # hyperparameters read when it runs
            adagrad_update(p_, g_, hist_, steps_, *self._values("lr", "epsilon", "weight_decay"))

        self._queue_update(param_name, param_value, param_grad, "adagrad_update", launch)


class Adam(Optimizer):
    """Adam (Kingma & Ba) as SINGA has it: g = grad + wd * w; m = beta_1 * m + (1 - beta_1) * g;
    v = beta_2 * v + (1 - beta_2) * g^2 (both start at zero); with t the step (1 first),
    w -= lr * (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon). Every hyperparameter
    may be a schedule."""

    beta_1 = _Hyperparameter(decay_rate=True)
    beta_2 = _Hyperparameter(decay_rate=True)
    epsilon = _Hyperparameter(non_negative=True)
    weight_decay = _Hyperparameter()
    _STATES = (("m", "Adam m"), ("v", "Adam v"))

    def __init__(self, lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr)
        self.beta_1, self.beta_2 = beta_1, beta_2
        self.epsilon, self.weight_decay = epsilon, weight_decay
        _not_negative(self, "weight_decay")

    def apply(self, param_name, param_value, param_grad):
        def launch(adam_update, p_, g_, m_, v_, steps_):  # hyperparameters read when it runs
            hyper = self._values("lr", "beta_1", "beta_2", "epsilon", "weight_decay")
            adam_update(p_, g_, m_, v_, steps_, *hyper)

        self._queue_update(param_name, param_value, param_grad, "adam_update", launch)


from nnmem.dist_opt import DistOpt  # noqa: E402, F401 (SINGA's opt.DistOpt; it builds on the above)
