"""SingaRep: an imported graph that runs on an nnmem device, and SingaBackend, the ONNX
backend (onnx.backend.base.Backend) whose ``prepare`` makes one.

``run`` walks the nodes in order. A node whose inputs are all known on the host (constants,
shapes) runs there, with ONNX's reference implementation (graph.host_eval): shapes stay
Python values, as a static plan needs. Any other node is converted into nnmem operators
(converters/), so its kernels, memory and gradients are nnmem's.

Constants that a converter reads as tensors become device tensors once, at the first run,
and are kept: the **parameters** (every floating-point weight of more than one element,
trained by an optimizer: ``params``), and the **states** (BatchNorm's running statistics,
scalars, masks and ids: kept, never trained). A value is dropped as soon as its last reader
has run, so that an eager pass frees activations as nnmem's own layers do.
"""

import math

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep

from nnmem import device as device_module
from nnmem import operation, tensor
from nnmem.sonnx.converters import REGISTRY, Call, Unsupported
from nnmem.sonnx.dtypes import device_dtype
from nnmem.sonnx.files import OnnxFileError
from nnmem.sonnx.graph import OPSETS, Absent, Graph, host_eval
from nnmem.tensor import Tensor


class SingaRep(BackendRep):
    """A prepared model: ``run(inputs)`` gives its outputs (see the module's docstring)."""

    def __init__(self, graph, dev):
        super().__init__()
        self.graph, self.dev = graph, dev
        self.params = {}  # weight name -> trained Tensor (made at the first run)
        self.states = {}  # constant name -> kept Tensor (statistics, scalars, masks, ids)

    # SINGA's names for the parsed parts
    @property
    def inputs(self):
        return self.graph.inputs

    @property
    def outputs(self):
        return self.graph.outputs

    @property
    def layers(self):
        return self.graph.nodes

    def run(self, x, **kwargs):
        """The outputs (NumPy arrays, in ONNX's dtypes) for inputs `x` (arrays or Tensors):
        inference, whatever this thread's training flag (BatchNorm reads its running
        statistics, Dropout passes its input through); a SONNXModel trains instead."""
        training = operation.is_training()
        operation.set_training(False)
        try:
            values = self.run_tensors(x, **kwargs)
        finally:
            operation.set_training(training)
        return [self._to_numpy(name, v) for name, v in zip(self._wanted(kwargs), values)]

    def run_tensors(self, x, last_layers=None, aux_output=()):
        """The outputs as Tensors (host arrays where an output is a shape or a constant).
        `last_layers` (SINGA's): run the nodes up to index (last_layers + 1) % len(nodes)
        when negative, else up to last_layers, and return that node's outputs; `aux_output`
        names more values to return."""
        if len(x) != len(self.graph.inputs):
            names = [i.name for i in self.graph.inputs]
            raise ValueError(f"run: {len(x)} input(s) given; the model takes {len(names)}: {names}")
        values = dict(self.graph.constants)
        for spec, value in zip(self.graph.inputs, x):
            values[spec.name] = self._input(spec, value)
        nodes = self._nodes(last_layers)
        wanted = self._wanted({"last_layers": last_layers, "aux_output": aux_output})
        pending = dict(self.graph.consumers)
        for node in nodes:
            results = self._run_node(node, values)
            for name in node.inputs:
                pending[name] = pending.get(name, 1) - 1
                if pending[name] <= 0 and name not in wanted and name not in self.graph.constants:
                    values.pop(name, None)
            for name, result in zip(node.outputs, results):
                if name:
                    values[name] = result
        return [values[name] for name in wanted]

    # -- one node ---------------------------------------------------------------------------
    def _run_node(self, node, values):
        args = [values[name] if name else None for name in node.inputs]
        while args and args[-1] is None:  # trailing optional inputs left out
            args.pop()
        on_host = all(a is None or isinstance(a, np.ndarray) for a in args)
        converter = REGISTRY[node.op_type]
        if on_host and converter.folded:
            return host_eval(node, self.graph.opset, args)
        call = Call(node, self.graph.opset, self)
        inputs = [self._argument(node, i, a, converter) for i, a in enumerate(args)]
        results = converter.fn(call, *inputs)
        return results if isinstance(results, (tuple, list)) else (results,)

    def _argument(self, node, index, value, converter):
        """A converter's input: a host array for its static inputs, else a device Tensor."""
        name = node.inputs[index]
        if index in converter.static and isinstance(value, Tensor):
            return self._static_tensor(node, name, value)
        if value is None or isinstance(value, Tensor):
            return value
        if isinstance(value, Absent) and (index in converter.static or self.dev.runs_kernels):
            raise OnnxFileError(
                f"node {node.name!r} ({node.op_type}) needs the values of {name!r}, whose "
                "weights were not loaded; load the model with its weight file beside it "
                "(nnmem can plan without them: nnmem plan model.onnx)"
            )
        if index in converter.static:
            return value
        return self.constant_tensor(name, value, learned=index not in converter.states)

    @staticmethod
    def _static_tensor(node, name, value):
        """A static input (a shape, axes, pads...) that is a device tensor: refused, since a
        static plan sizes every tensor before the step, unless it is empty (the default)."""
        if value.size() == 0:
            return np.zeros(value.shape, np.int64)
        raise Unsupported(
            f"node {node.name!r} ({node.op_type}): its input {name!r} is a device tensor "
            "computed in the step; nnmem needs it known before the step (a constant, or "
            "computed from shapes)"
        )

    def constant_tensor(self, name, value, learned=True):
        """The device tensor kept for the constant `name` (made once): a parameter when
        `learned` and it is a floating-point array of more than one element, else a state."""
        for kept in (self.params, self.states):
            if name in kept:
                return kept[name]
        absent = isinstance(value, Absent)  # a planning device: a shape, no bytes
        shape, dtype = tuple(value.shape), np.dtype(value.dtype)
        trained = learned and dtype.kind == "f" and math.prod(shape) > 1
        kept_as = device_dtype(dtype)
        t = Tensor(shape, self.dev, kept_as, requires_grad=trained, stores_grad=trained)
        t.name = name
        (self.params if trained else self.states)[name] = t
        if absent:
            t.set_value(0)  # on a planning device: the allocation alone
        else:
            t.copy_from_numpy(_checked_cast(value, kept_as, name))
        return t

    def _input(self, spec, value):
        if isinstance(value, Tensor):
            if value.device is not self.dev:
                self.dev = value.device  # a rep runs where its inputs live (SINGA)
            return value
        array = np.asarray(value)
        expected = tuple(spec.shape)
        if len(expected) != array.ndim or any(
            e is not None and e != s for e, s in zip(expected, array.shape)
        ):
            raise ValueError(
                f"input {spec.name!r}: shape {array.shape}, the model takes {expected} "
                "(None: any size)"
            )
        dtype = device_dtype(array.dtype)
        t = Tensor(array.shape, self.dev, dtype, requires_grad=False)
        return t.copy_from_numpy(_checked_cast(array, dtype, spec.name))

    # -- what to run and return -------------------------------------------------------------
    def _nodes(self, last_layers):
        nodes = self.graph.nodes
        if last_layers is None:
            return nodes
        last = last_layers if last_layers >= 0 else (last_layers + 1) % len(nodes)
        return nodes[: last + 1]

    def _wanted(self, kwargs):
        last_layers = kwargs.get("last_layers")
        if last_layers is None:
            names = list(self.graph.outputs)
        else:
            names = [o for o in self._nodes(last_layers)[-1].outputs if o]
        return names + [n for n in kwargs.get("aux_output", ()) if n not in names]

    def _to_numpy(self, name, value):
        array = value if isinstance(value, np.ndarray) else tensor.to_numpy(value)
        dtype = self.graph.output_dtypes.get(name)
        return array.astype(dtype) if dtype is not None else array


def _checked_cast(array, dtype, name):
    if (
        array.dtype.kind in "iu"
        and array.size
        and (array.max() > np.iinfo(np.int32).max or array.min() < np.iinfo(np.int32).min)
    ):
        raise ValueError(f"{name}: integer values beyond int32, which nnmem keeps ids in")
    return array.astype(dtype, copy=False)


class SingaBackend(Backend):
    """The ONNX backend (onnx.backend.base.Backend): SINGA's class name."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        """A SingaRep of `model` (a ModelProto) on `device` ("CPU", "CUDA" or an nnmem
        Device). Every operator is checked here (graph.Graph), in place of onnx.checker,
        which the base class runs: it refuses a model whose weights were left out, which
        nnmem plans, and names no node in its messages."""
        return SingaRep(Graph(model), _device(device))

    @classmethod
    def supports_device(cls, device):
        return device in ("CPU", "CUDA") and (device == "CPU" or _has_cuda())

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, opset_version=None,
                 **kwargs):  # fmt: skip
        """Run one NodeProto on NumPy inputs (SINGA's run_node): the node as a one-node
        model of the newest opset nnmem reads, unless `opset_version` says otherwise."""
        values = [np.asarray(x) for x in inputs]
        names = [name for name in node.input if name]
        graph = helper.make_graph(
            [node],
            "run_node",
            [
                helper.make_tensor_value_info(n, _elem_type(v.dtype), v.shape)
                for n, v in zip(names, values)
            ],  # fmt: skip
            [
                helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
                for n in node.output
                if n
            ],  # fmt: skip
        )
        opset = opset_version or OPSETS[1]
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return cls.prepare(model, device).run(values)


def _elem_type(dtype):
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _has_cuda():
    try:
        device_module.create_cuda_gpu()
    except Exception:  # no GPU, no driver: the backend reports CPU only
        return False
    return True


def _device(device):
    if not isinstance(device, str):
        return device
    if device.upper() == "CPU":
        return device_module.get_default_device()
    if device.upper() == "CUDA":
        return device_module.create_cuda_gpu()
    raise ValueError(f"prepare(device={device!r}): give 'CPU', 'CUDA' or an nnmem Device")


prepare = SingaBackend.prepare
run_node = SingaBackend.run_node
