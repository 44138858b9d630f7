"""The Optimizer base: SINGA's optimizer interface, the two-phase step, the step counter and
every parameter's state, and SINGA's get_states / set_states of that state. The update rules
(SGD, Adam, ...) are subclasses that say only how one parameter is updated
(nnmem/optim/update_rules.py).

``optimizer(loss)`` runs a step in two phases:

1. compute: backward yields every parameter's gradient; the optimizer state that the updates
   need (momentum buffers, Adam moments, the step counter) is allocated;
2. commit: every parameter is updated in place, with Ctrl-C held back until all are.

Anything that fails in phase 1 (out of memory, an interrupt, a bad label) leaves parameters
and optimizer state exactly as they were; phase 2 allocates nothing, so it cannot run out of
memory half-way. The price: every gradient lives until backward ends (one more copy of the
parameters at most), where updating as soon as a gradient is final could drop it at once.

State (momentum buffers, Adam moments) is keyed by the parameter tensor, not by its name,
so two layers sharing a name cannot share a buffer. The step count is a tensor advanced by a
device operation; hyperparameters are read when the update runs (a replay sees them change).
"""

import math
import numbers
from collections.abc import Mapping

import numpy as np

from nnmem import autograd
from nnmem.interrupts import deferred_interrupts
from nnmem.optim.schedules import DecayScheduler, Hyperparameter, kernel_value
from nnmem.tensor import Tensor, float32, to_numpy

_INT32_MAX = 2**31 - 1
_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float16, np.float64))


def _optimizer_dtype(owner, dtype):
    """SINGA's dtype argument of an optimizer, checked, as a NumPy dtype."""
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


#: SINGA's attribute for a setting's current value -> the setting (SGD's mom_value: momentum).
_VALUE_NAMES = {
    "lr_value": "lr",
    "mom_value": "momentum",
    "dam_value": "dampening",
    "decay_value": "weight_decay",
    "rho_value": "rho",
    "epsilon_value": "epsilon",
    "beta_1_value": "beta_1",
    "beta_2_value": "beta_2",
}


class Optimizer:
    """The base: a learning rate (a number or a DecayScheduler), SINGA's dtype (stored: the
    parameters keep their own), the step counter and every parameter's state.

    _STATES lists a subclass's state tensors per parameter, (get_states' name for them, the
    name memory reports give them), in the order state_of returns them."""

    lr = Hyperparameter()
    _STATES = ()

    def __init__(self, lr, dtype=float32):
        self.lr = lr
        self.dtype = _optimizer_dtype(type(self).__name__, dtype)
        self._steps = None  # a 1-element int32 tensor on the parameters' device
        self.moments = {}  # parameter tensor -> its state (see state_of)
        # What set_states gave for what does not exist yet: "step_counter" -> the count, and
        # state name -> {parameter name: array}, used when the counter / the state is made.
        self._restored = {}
        self.loss_scaler = None  # mixed precision's (optim/mixed_precision.py): see compile

    def __call__(self, loss):
        """Backward from `loss`, then update every parameter and advance the step counter;
        all or (when backward or an allocation fails) none of it. A loss scaler's: see it."""
        if self.loss_scaler is not None:
            return self.loss_scaler.backward_and_update(self, loss)
        self.apply_gradients(list(autograd.backward(loss)), loss.device)

    def apply_gradients(self, gradients, device, then=None, through=None):
        """The two phases for (parameter, gradient) pairs: make every state the updates need,
        then, in the commit phase, update every parameter, advance the step counter and call
        then() (a wrapper's own part of the commit: DistOpt's residuals). through(param, grad,
        update) runs one pair's update(param, grad) with its own calls around it."""
        _check_gradient_sizes(gradients)  # here: an update kernel refusing one would cut the commit
        self._allocate_state([param for param, _ in gradients], device)
        update = self.update  # queues the rule's kernel for one pair
        with device.commit_phase():
            for param, grad in gradients:
                if through is None:
                    update(param, grad)
                else:
                    through(param, grad, update)
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

    # -- what Model calls on its optimizer around a training step (DistOpt has its own) -----
    def before_step(self, model):
        """Before each training step of `model`: nothing, for one process (DistOpt first
        gives every rank rank 0's model)."""

    def step_failed(self, error):
        """After a failed training step: nothing (the undo record drops the state it made)."""

    def hyperparameters(self):
        """(name, value) of every setting the update kernels are launched with (lr, momentum,
        ...), sorted, a schedule as the tuple the kernels evaluate: what a step captured as
        one CUDA graph froze (a schedule follows the step count on the device by itself)."""
        found = [(k, v.schedule()) for k, v in vars(self).items() if isinstance(v, DecayScheduler)]
        found += [(k, v) for k, v in vars(self).items() if isinstance(v, numbers.Number)]
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

    def __getattr__(self, name):
        """SINGA's lr_value, mom_value, ...: the setting's value now (a schedule's at the steps
        taken), a 1-element float32 tensor, read when asked."""
        setting = _VALUE_NAMES.get(name)
        if setting is None or setting not in vars(self):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = getattr(self, setting)
        if isinstance(value, DecayScheduler):
            value = value(self._count())
        device = self._steps.device if self._steps is not None else None
        return Tensor((1,), device, requires_grad=False).set_value(value)

    @property
    def step_counter(self):
        """The steps taken, as SINGA's: a 1-element int32 tensor (the one the updates read, once
        one has made it; before, a new tensor holding the count)."""
        made = self._steps is not None
        return self._steps if made else Tensor((1,), None, np.int32).set_value(self._count())

    def _count(self):
        """The steps taken, as an int (read from the device once the counter is there)."""
        made = self._steps is not None
        return int(to_numpy(self._steps)[0]) if made else self._restored.get("step_counter", 0)

    def apply(self, param_name, param_value, param_grad):
        raise NotImplementedError

    def update(self, param, grad):
        """SINGA's: queue one parameter's update by its gradient now (the count: step())."""
        self.apply(param.name, param, grad)

    def step(self):
        """Advance the step counter: on the device once it exists (the updates read it there),
        else the count kept for it (SINGA's tests step an optimizer before any update)."""
        if self._steps is None:
            self._restored["step_counter"] = self._restored.get("step_counter", 0) + 1
        else:
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
        return tuple(kernel_value(getattr(self, name)) for name in names)

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
        states = {"step_counter": self._count()}
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
