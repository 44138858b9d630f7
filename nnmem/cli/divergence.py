"""Where a diverging run first went wrong: the first layer whose output holds a NaN or an Inf.

By the time a step's loss reads NaN, that step's update has already written NaN into the
parameters, so running the forward pass again would blame the very first layer. nnmem train
therefore keeps a host copy of the model's states from before each step (StateCopy), puts it
back when the loss is not finite, and runs that batch's forward pass again, eagerly, checking
every layer's output as it is produced (first_nonfinite_layer). diverged() makes the error
that stops the run from what it finds.
"""

import numpy as np

from nnmem.layer import Layer
from nnmem.memory import OutOfMemory
from nnmem.tensor import Tensor, to_numpy


class StateCopy:
    """A host copy of a model's parameters and states (BatchNorm's running statistics),
    refreshed in place by save() (no allocation per step) and written back by restore()."""

    def __init__(self, model):
        self.tensors = model.get_states()
        self.arrays = {name: to_numpy(t) for name, t in self.tensors.items()}

    def save(self):
        for name, t in self.tensors.items():
            t.device.to_host(t, out=self.arrays[name])

    def restore(self):
        for name, t in self.tensors.items():
            t.copy_from_numpy(self.arrays[name])


def diverged(args, model, before_step, tx, x, loss, epoch, step):
    """The error that stops a run whose loss is NaN or Inf: the step, the first layer whose
    output was not finite, and what to change. The model's states are put back as they were
    before that step (its update wrote NaN into them), to find the layer and to stay so."""
    where = f"the loss is {loss} at epoch {epoch + 1}, batch {step + 1}"
    before_step.restore()
    if not np.isfinite(x).all():
        return FloatingPointError(
            f"{where}: the input batch itself holds NaN or Inf values; "
            f"check the data set ({args.data})"
        )
    try:
        layer = first_nonfinite_layer(model, tx)
    except OutOfMemory:
        layer = "unknown (the pool has no room to run the forward pass again)"
    finally:
        before_step.restore()  # the pass moved BatchNorm's running statistics
    culprit = (
        f"the first layer whose output is not finite is {layer}"
        if layer
        else "every layer's output is finite, the loss itself is not"
    )
    return FloatingPointError(
        f"{where}, and {culprit}: the run diverged; lower --lr (now {args.lr:g})"
    )


class _NotFinite(Exception):
    """Raised inside the watched forward pass to stop it at the first non-finite output."""

    def __init__(self, layer_name):
        super().__init__(layer_name)
        self.layer_name = layer_name


def first_nonfinite_layer(model, x):
    """The name of the first layer, in the order the layers return, whose output holds a NaN
    or an Inf when model.forward(x) runs, or None if every output is finite.

    model.forward is called directly, not model(x), so it runs eagerly even in graph mode, in
    the model's current mode (training: BatchNorm uses the batch's statistics, as in the step
    that diverged). Every Layer's __call__ is wrapped for the duration: a sub-layer returns
    before the layer that contains it, so the innermost culprit is named. The wrapper is set on
    the class, for every model in the process; nnmem train runs one model in one thread."""
    original_call = Layer.__call__

    def watched_call(layer, *inputs, **kwargs):
        output = original_call(layer, *inputs, **kwargs)
        if not _finite(output):
            raise _NotFinite(layer.full_name() or type(layer).__name__)
        return output

    Layer.__call__ = watched_call
    try:
        with np.errstate(all="ignore"):  # overflow is what we are looking for, not news
            model.forward(x)
    except _NotFinite as found:
        return found.layer_name
    finally:
        Layer.__call__ = original_call
    return None


def _finite(output):
    """True if the output (a Tensor, or a tuple or list of them) holds no NaN and no Inf."""
    if isinstance(output, Tensor):
        return bool(np.isfinite(to_numpy(output)).all())
    if isinstance(output, (tuple, list)):
        return all(_finite(o) for o in output)
    return True
