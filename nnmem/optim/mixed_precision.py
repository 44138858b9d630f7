"""Mixed precision: float16 storage, float32 master weights and dynamic loss scaling
(Micikevicius et al., "Mixed Precision Training", 2018), what ``Model.compile(...,
precision="float16")`` gives a model's optimizer.

Why each part:

- **float16 storage** halves the bytes of every activation, gradient and parameter the step
  keeps. Kernels compute in float32 (devices/half.py on the CPU, kernels/cuda on a GPU) and
  round once, where they store.
- **Master weights.** float16 has an 11-bit significand: an update w - lr*g with
  |lr*g| < |w| * 2^-12 rounds back to w itself, so small updates would be lost for ever. The
  optimizer therefore updates a float32 copy of each float16 parameter (its *master*) with
  float32 state and float32 gradients, and writes the master, rounded, into the parameter that
  the forward pass reads.
- **Loss scaling.** Gradients below float16's smallest subnormal (2^-24, about 6e-8) flush
  to zero. Backward therefore starts from dy = S instead of 1: every gradient is S times the
  true one (exactly: S is a power of two), and the update divides by S again, in float32.
- **Dynamic.** Too large an S overflows: some gradient is inf or NaN. After backward the
  step counts them (one kernel per gradient into one counter, then one host read). Any at
  all: the step is *skipped* -- it changes nothing, as a failed step changes nothing (the
  commit does not run, and Model puts back BatchNorm's running statistics from the step's undo
  record: graph/skipped.py) -- and S halves. After `growth_interval` clean steps in a row, S
  doubles, up to the largest power of two the loss's dtype holds (2^15 for float16).

Memory contract, per float16 parameter of P elements: the master, 4P bytes, and the optimizer's
state in float32 beside it (SGD's momentum: 4P), for as long as training goes on: with the
float16 parameter and gradient, 12P bytes, as many as float32 SGD with momentum keeps. In each
step, one float32 buffer as large as the largest gradient, into which the commit unscales each
gradient in turn just before its update, and one 4-byte counter. A graph step with the
overflow check reads the counter on the host, so on a GPU it is replayed kernel by kernel, not
as one CUDA graph.

Masters are made from the parameters at the first step; ``refresh_masters()`` copies the
parameters in again (Model.load_states calls it). Checkpoints hold the float16 parameters; the
loss scale starts again from `init_scale` in a new process.
"""

import math

import numpy as np

from nnmem import autograd
from nnmem.graph.skipped import SkippedStep
from nnmem.tensor import Tensor, float16, float32, to_numpy


class LossScaler:
    """Dynamic loss scaling and master weights for one optimizer (the module's docstring).

    scale: S now; clean_steps: clean steps since S last changed; skipped_steps: how many steps
    were skipped in all; last_step_skipped: whether the latest step was."""

    def __init__(self, init_scale=2.0**15, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):  # fmt: skip
        for name, value, good in (
            ("init_scale", init_scale, init_scale > 0 and _power_of_two(init_scale)),
            ("growth_factor", growth_factor, growth_factor > 1 and _power_of_two(growth_factor)),
            ("backoff_factor", backoff_factor, 0 < backoff_factor < 1
             and _power_of_two(backoff_factor)),
            ("growth_interval", growth_interval, isinstance(growth_interval, int)
             and growth_interval >= 1),
        ):  # fmt: skip
            if not good:
                raise ValueError(
                    f"LossScaler({name}={value!r}): give a power of two (a scale, a factor "
                    "above 1, a backoff below 1) or, for growth_interval, a whole number >= 1: "
                    "powers of two scale gradients exactly"
                )
        self.scale = float(init_scale)
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval = growth_interval
        self.clean_steps = 0
        self.skipped_steps = 0
        self.last_step_skipped = False
        self.masters = {}  # float16 parameter -> its float32 master
        self._step_scale = self.scale  # the S this step's gradients carry (set by its seed)
        self._max_scale = math.inf

    def backward_and_update(self, optimizer, loss):
        """Backward from loss * S, the overflow check, then (if clean) `optimizer`'s update of
        the masters, each by its gradient unscaled into float32 just before, each master then
        rounded into its parameter."""
        dev = loss.device
        grads = list(autograd.backward(loss, self._seed(loss)))
        try:
            self._check([g for _, g in grads], dev)
        except SkippedStep:  # an eager step, checked now: nothing to commit
            return
        pairs = [(self._master(p), g) for p, g in grads]
        params = {id(m): p for (m, _), (p, _) in zip(pairs, grads)}  # master -> its parameter
        scratch = self._scratch(grads, dev)

        def through(master, grad, update):
            update(master, self._unscaled(grad, scratch))
            param = params[id(master)]
            if param is not master:
                cast = dev.kernels.cast
                dev.exec(
                    lambda p_, m_: cast(p_.reshape(-1), m_.reshape(-1)),
                    reads=(master,),
                    writes=(param,),
                    name=f"{param.name}:master to float16",
                    phase="update",
                )

        optimizer.apply_gradients(pairs, dev, through=through)

    def refresh_masters(self):
        """Copy every parameter into its master (after the parameters were set from outside)."""
        for param, master in self.masters.items():
            master.copy_from_numpy(to_numpy(param).astype(np.float32))

    # -- the parts of a step ----------------------------------------------------------------
    def _seed(self, loss):
        """dy = S for backward, S read when the fill runs (so a replay uses the S of now)."""
        self._max_scale = 2.0 ** math.floor(math.log2(np.finfo(loss.dtype).max))
        self.scale = min(self.scale, self._max_scale)
        seed = Tensor(loss.shape, loss.device, loss.dtype, requires_grad=False)
        fill = loss.device.kernels.fill

        def fill_scale(seed_):
            self._step_scale = self.scale
            fill(seed_.reshape(-1), self.scale)

        loss.device.exec(fill_scale, reads=(), writes=(seed,), name="backward:fill loss scale",
                         phase="backward")  # fmt: skip
        return seed

    def _check(self, grads, dev):
        """Count the gradients' inf and NaN values on the device, then read the count on the
        host: skip the step (SkippedStep) and lower S if any, else count a clean step."""
        count = Tensor((1,), dev, np.int32, requires_grad=False, name="loss scale: overflows")
        k = dev.kernels
        dev.exec(lambda c_: k.fill(c_, 0), reads=(), writes=(count,), name="loss scale: zero",
                 phase="backward")  # fmt: skip
        for g in grads:
            dev.exec(
                lambda c_, _, g_: k.count_nonfinite(c_, g_.reshape(-1)),
                reads=(count, g),
                writes=(count,),
                name="loss scale: count inf/NaN",
                phase="backward",
            )

        def check(c_, _):
            overflows = int(_host_value(dev, c_))
            self.last_step_skipped = overflows > 0
            if overflows:
                self.skipped_steps += 1
                self.scale *= self.backoff_factor
                self.clean_steps = 0
                raise SkippedStep(f"{overflows} inf/NaN gradient values at loss scale "
                                  f"{self._step_scale:g}")  # fmt: skip
            self.clean_steps += 1
            if self.clean_steps == self.growth_interval:
                self.scale = min(self.scale * self.growth_factor, self._max_scale)
                self.clean_steps = 0

        check.runs_on_host = True  # a host read: a CUDA graph cannot capture it
        dev.exec(check, reads=(count,), writes=(count,), name="loss scale: check",
                 phase="backward")  # fmt: skip

    def _master(self, param):
        """The float32 master of a float16 parameter (made from it, on the host, at its first
        step); any other parameter is its own master."""
        if param.dtype != float16:
            return param
        if param not in self.masters:
            # named as the parameter: the optimizer keys its state (and checkpoints) by name
            master = Tensor(
                param.shape, param.device, float32, requires_grad=False, name=param.name
            )
            if param.device.runs_kernels:
                master.copy_from_numpy(to_numpy(param).astype(np.float32))
            else:  # a planning device: bytes are only counted
                master.set_value(0)
            self.masters[param] = master
        return self.masters[param]

    def _scratch(self, grads, dev):
        """The float32 buffer every gradient is unscaled into, in turn, in the commit: as
        large as the largest gradient, and written once here, before the commit, so that
        nothing is allocated inside it (an allocation there could fail half-way)."""
        size = max((g.size() for _, g in grads), default=0)
        scratch = Tensor((size,), dev, float32, requires_grad=False, name="unscaled gradient")
        fill = dev.kernels.fill
        dev.exec(lambda s_: fill(s_, 0.0), reads=(), writes=(scratch,),
                 name="loss scale: unscaled gradient buffer", phase="backward")  # fmt: skip
        return scratch

    def _unscaled(self, grad, scratch):
        """g / S in float32, in the first g.size() elements of `scratch` (a view: the next
        gradient's unscale overwrites it once this update has read it)."""
        out = Tensor._on_block(scratch.block, grad.shape, float32, grad.device)
        k = grad.device.kernels

        def unscale(out_, g_):
            k.cast(out_.reshape(-1), g_.reshape(-1))
            k.scale(out_.reshape(-1), 1.0 / self._step_scale)

        grad.device.exec(unscale, reads=(grad,), writes=(out,), name="loss scale: unscale",
                         phase="update")  # fmt: skip
        return out


def _power_of_two(x):
    return isinstance(x, (int, float)) and x > 0 and math.frexp(x)[0] == 0.5


def _host_value(dev, array):
    """array[0] read on the host: a device array is copied after the compute stream's work."""
    if hasattr(array, "copy_to_host"):
        out = array.copy_to_host(stream=dev.compute_stream)
        dev.compute_stream.synchronize()
        return out[0]
    return array[0]
