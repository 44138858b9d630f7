"""Layer: SINGA's stateful building block, lazily initialised from its first input.

A layer creates its parameters the first time it is called, from the input's shape, dtype and
device (so ``Linear(500)`` needs no input size). Sub-layers and tensors assigned as attributes
are registered in assignment order, and named with dots: ``conv1.W``, ``bn1.running_mean``.
"""

import functools

import numpy as np

from nnmem import autograd
from nnmem.tensor import Tensor, to_numpy


class Layer:
    sep = "."

    def __init_subclass__(cls, **kwargs):
        """A subclass's forward initialises the layer on its first call, as SINGA's LayerMeta
        does: models call self.forward(x) directly from train_one_batch."""
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__:
            cls.forward = _initialising(cls.__dict__["forward"])

    def __init__(self):
        self.__dict__.update(
            name=None, _parent=None, _layers={}, _params={}, _states={}, _initialized=False
        )

    # -- registration ----------------------------------------------------------------------
    def __setattr__(self, name, value):
        if isinstance(value, Layer):
            self._layers[name] = value
            value.__dict__.update(_parent=self, name=name)
        elif isinstance(value, Tensor) and not name.startswith("_"):
            # Learned tensors (stores_grad) are parameters; others (running stats) are states.
            kind = "parameter" if value.stores_grad else "state"
            (self._params if value.stores_grad else self._states)[name] = value
            prefix = self.full_name()
            value.name = f"{prefix + self.sep if prefix else ''}{name}"
            value.block.desc = f"{kind} {value.name} {value.shape} {value.dtype}"
        object.__setattr__(self, name, value)

    def register_layers(self, *layers):
        """Register sub-layers kept in a list (SINGA): named ClassName_index, in order.
        A single dict argument registers them under its keys."""
        if len(layers) == 1 and isinstance(layers[0], dict):
            items = layers[0].items()
        else:
            items = ((f"{type(v).__name__}_{i}", v) for i, v in enumerate(layers))
        for name, value in items:
            if not isinstance(value, Layer):
                raise TypeError(f"register_layers: {name} is a {type(value).__name__}, not a Layer")
            self._layers[name] = value
            value.__dict__.update(_parent=self, name=name)

    def full_name(self):
        """The dotted path from the outermost named layer, e.g. "block1.conv2"."""
        parts, layer = [], self
        while layer is not None and layer.name is not None:
            parts.append(layer.name)
            layer = layer._parent
        return self.sep.join(reversed(parts))

    # -- calling ----------------------------------------------------------------------------
    def initialize(self, *inputs):
        """Create parameters from the first inputs (override in layers that have any)."""

    def forward(self, *inputs):
        raise NotImplementedError

    def __call__(self, *inputs, **kwargs):
        self._initialize_once(inputs)
        name = self.full_name()
        if not name:
            return self.forward(*inputs, **kwargs)
        with autograd.name_scope(name):
            return self.forward(*inputs, **kwargs)

    def device_check(self, *inputs):
        """Move every tensor to the first one's device (SINGA: a layer's inputs and parameters
        must share a device)."""
        for t in inputs[1:]:
            if t.device is not inputs[0].device:
                t.to_device(inputs[0].device)

    def dtype_check(self, *inputs):
        """Convert every tensor to the first one's dtype, in place (SINGA)."""
        for t in inputs[1:]:
            if t.dtype != inputs[0].dtype:
                t.to_type(inputs[0].dtype)

    def _initialize_once(self, inputs):
        if not self._initialized:
            self.initialize(*inputs)
            self.__dict__["_initialized"] = True

    # -- parameters and states ------------------------------------------------------------------
    def _named(self, kind, prefix=""):
        out = {}
        for attr, t in getattr(self, kind).items():
            t.name = prefix + attr
            out[t.name] = t
        for name, sub in self._layers.items():
            out.update(sub._named(kind, prefix + name + self.sep))
        return out

    def get_params(self):
        """{dotted name: Tensor} of every learned parameter, this layer's then sub-layers'."""
        return self._named("_params")

    def get_states(self):
        """Parameters plus the other persistent tensors (e.g. BatchNorm running statistics)."""
        states = self._named("_params")
        states.update(self._named("_states"))
        return states

    def set_params(self, parameters):
        """Copy values (Tensors or NumPy arrays) into the parameters of the same names."""
        self._set(self.get_params(), parameters)

    def set_states(self, states):
        self._set(self.get_states(), states)

    @staticmethod
    def _set(mine, values):
        unknown = sorted(set(values) - set(mine))
        if unknown:
            raise KeyError(f"no parameter or state named {unknown}; this layer has {sorted(mine)}")
        arrays = {k: v if isinstance(v, np.ndarray) else to_numpy(v) for k, v in values.items()}
        for k, a in arrays.items():  # check all before writing any: a failure changes nothing
            if a.shape != mine[k].shape:
                raise ValueError(f"{k}: value of shape {a.shape}, parameter has {mine[k].shape}")
        for k, a in arrays.items():
            mine[k].copy_from_numpy(a.astype(mine[k].dtype, copy=False))


def _initialising(forward):
    @functools.wraps(forward)
    def run(self, *inputs, **kwargs):
        self._initialize_once(inputs)
        return forward(self, *inputs, **kwargs)

    return run


def parameter_like(shape, x, requires_grad=True):
    """A parameter (stores_grad) or a state tensor on x's device with x's float dtype.

    Layers assign it to an attribute first and fill it afterwards: the assignment names it
    (conv1.W), so if filling it (its first write, the allocation) runs out of memory, the
    report names the parameter instead of an anonymous tensor."""
    return Tensor(shape, x.device, x.dtype, requires_grad=requires_grad, stores_grad=requires_grad)
