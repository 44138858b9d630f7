"""An ONNX graph as nnmem runs it: nodes in an order that respects every edge, constants
folded on the host, and every operator checked before any step.

``Graph(model)`` reads a ModelProto once:

- the **inputs** are the graph inputs that are not initializers (their names, dtypes and
  shapes; a named dimension such as "batch" is None);
- the **constants** are the initializers and the results of Constant nodes, as NumPy arrays,
  or ``Absent`` (a shape and a dtype, no bytes) for weights stored outside the file and not
  loaded: a plan needs only their shapes;
- the **nodes** are sorted topologically (Kahn's algorithm; a cycle is an error naming the
  nodes on it, as is an input that nothing produces);
- every node whose inputs are all constants, and none Absent, is **folded**: run once on the
  host by ONNX's own reference implementation of its operator (onnx.reference), so that
  ConstantOfShape weights, shape arithmetic and the like become constants before any step;
- every remaining node is **checked**: its operator must have a converter
  (nnmem/sonnx/converters) for the model's opset, and each attribute must be one the
  converter reads. Otherwise one line names the node, the operator, the opset and the
  attribute, here at import, never in the middle of a step.
"""

import math
from collections import defaultdict, deque
from typing import NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.external_data_helper import uses_external_data
from onnx.reference.ops import load_op

from nnmem.sonnx import converters
from nnmem.sonnx.dtypes import DTYPES
from nnmem.sonnx.files import OnnxFileError

#: The most elements a value folded on the host may have (2**28: 1 GiB of float32): a
#: ConstantOfShape or Expand asking for more is refused before NumPy tries to allocate it.
MAX_FOLDED_ELEMENTS = 2**28
#: The opsets of the default domain nnmem reads: from PyTorch's oldest exports to the newest
#: onnx writes (each converter states the operator versions it implements).
OPSETS = (6, 28)


#: A model nnmem cannot run: an operator, attribute or opset it has no converter for.
UnsupportedModel = converters.Unsupported


class Absent(NamedTuple):
    """A weight whose shape and dtype are known but whose bytes were not loaded."""

    shape: tuple
    dtype: np.dtype


class Node(NamedTuple):
    name: str
    op_type: str
    inputs: tuple  # value names; "" where an optional input is left out
    outputs: tuple
    attrs: dict  # attribute name -> Python value (tensors as NumPy arrays)
    proto: onnx.NodeProto


class Input(NamedTuple):
    name: str
    dtype: np.dtype
    shape: tuple  # None where the dimension is named (e.g. "batch") or unknown


class Graph:
    """See the module's docstring."""

    def __init__(self, model):
        self.opset = _opset(model)
        g = model.graph
        self.constants = {t.name: _constant(t) for t in g.initializer}
        self.inputs = [_input(v) for v in g.input if v.name not in self.constants]
        # The batch the graph was exported at, when its first input fixes one (converters/
        # tensors.py: reshape keeps a different batch run through it).
        first = self.inputs[0].shape if self.inputs else ()
        self.batch = first[0] if first else None
        self.outputs = [v.name for v in g.output]
        self.output_dtypes = {v.name: _elem_dtype(v) for v in g.output}
        nodes = [_node(n, i) for i, n in enumerate(g.node)]
        self.nodes = []
        for node in _sorted(nodes, set(self.constants) | {i.name for i in self.inputs}):
            if node.op_type == "Constant":
                self.constants[node.outputs[0]] = _constant_node(node)
            elif self._foldable(node):
                self._fold(node)
            else:
                self.nodes.append(node)
        for node in self.nodes:
            converters.check(node, self.opset)
        missing = [o for o in self.outputs if o not in self.constants and not self._made(o)]
        if missing:
            raise OnnxFileError(f"graph output(s) {missing} are made by no node")
        self.consumers = defaultdict(int)  # value name -> how many node inputs read it
        for node in self.nodes:
            for name in node.inputs:
                self.consumers[name] += 1

    def _made(self, name):
        return any(name in n.outputs for n in self.nodes) or name in {i.name for i in self.inputs}

    def _foldable(self, node):
        if converters.never_folded(node.op_type):
            return False
        values = [self.constants.get(name) for name in node.inputs if name]
        return all(isinstance(v, np.ndarray) for v in values)

    def _fold(self, node):
        values = [self.constants[name] if name else None for name in node.inputs]
        results = host_eval(node, self.opset, values)
        self.constants.update(zip(node.outputs, results))


def host_eval(node, opset, values):
    """Run `node` on NumPy arrays with ONNX's reference implementation of its operator."""
    _check_size(node, opset, values)
    try:
        op = load_op("", node.op_type, opset)(node.proto, _RUN_PARAMS | {"opsets": {"": opset}})
        results = op.run(*values)
    except Exception as e:  # the reference implementation's own message, with the node named
        raise UnsupportedModel(
            f"node {node.name!r} ({node.op_type}, opset {opset}): cannot be computed on the "
            f"host: {type(e).__name__}: {e}"
        ) from None
    return [np.asarray(r) for r in results]


_RUN_PARAMS = {
    "verbose": 0,
    "log": lambda *args: None,
    "new_ops": None,
    "existing_functions": {},
    "evaluator_cls": None,
}


def _check_size(node, opset, values):
    """Refuse to fold an operator that would make a value of more than MAX_FOLDED_ELEMENTS."""
    shape = None
    if node.op_type in ("ConstantOfShape", "Expand") and values and values[-1] is not None:
        shape = values[-1].astype(np.int64).ravel().tolist()
        if node.op_type == "Expand" and values[0] is not None:
            shape = np.broadcast_shapes(values[0].shape, tuple(max(d, 0) for d in shape))
    elif node.op_type == "Tile" and len(values) > 1:
        shape = [a * b for a, b in zip(values[0].shape, values[1].ravel().tolist())]
    elif node.op_type == "Range" and len(values) == 3:
        start, limit, delta = (float(v) for v in values)
        shape = [math.ceil((limit - start) / delta) if delta else math.inf]
    if shape is not None and (any(d < 0 for d in shape) or math.prod(shape) > MAX_FOLDED_ELEMENTS):
        raise OnnxFileError(
            f"node {node.name!r} ({node.op_type}) would make a value of shape {list(shape)}: "
            f"negative or more than {MAX_FOLDED_ELEMENTS} elements; the model is corrupt"
        )


def _opset(model):
    versions = {i.domain: i.version for i in model.opset_import}
    opset = versions.get("", versions.get("ai.onnx"))
    if opset is None:
        raise UnsupportedModel("the model imports no opset of the default ONNX domain")
    if not OPSETS[0] <= opset <= OPSETS[1]:
        raise UnsupportedModel(
            f"opset {opset}: nnmem reads opsets {OPSETS[0]} to {OPSETS[1]}; convert the model "
            "with onnx.version_converter.convert_version(model, 17)"
        )
    return opset


def _node(proto, index):
    if proto.domain not in ("", "ai.onnx"):
        raise UnsupportedModel(
            f"node {proto.name or index!r} ({proto.domain}.{proto.op_type}): operators of "
            f"domain {proto.domain!r} are not supported; only the default ONNX domain is"
        )
    attrs = {a.name: _attribute(a) for a in proto.attribute}
    name = proto.name or f"{proto.op_type}_{index}"
    return Node(name, proto.op_type, tuple(proto.input), tuple(proto.output), attrs, proto)


def _attribute(a):
    value = helper.get_attribute_value(a)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _constant(t):
    if uses_external_data(t):
        return Absent(tuple(t.dims), np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)))
    return numpy_helper.to_array(t)


def _constant_node(node):
    (key, value), *rest = node.attrs.items()
    if rest or key not in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        raise UnsupportedModel(f"node {node.name!r} (Constant): attributes {list(node.attrs)}")
    dtype = np.float32 if key.startswith("value_float") else np.int64
    return np.asarray(value, dtype=None if key == "value" else dtype)


def _type_name(value_info):
    name = helper.tensor_dtype_to_string(value_info.type.tensor_type.elem_type)
    return name.removeprefix("TensorProto.")


def _elem_dtype(value_info):
    elem = value_info.type.tensor_type.elem_type
    if not elem or elem == onnx.TensorProto.STRING:
        return np.dtype(object) if elem else None
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))


def _input(v):
    if v.type.WhichOneof("value") != "tensor_type":
        raise UnsupportedModel(
            f"input {v.name!r} is a {v.type.WhichOneof('value')}; nnmem takes tensors only"
        )
    dtype = _elem_dtype(v)
    if dtype is not None and dtype not in DTYPES:
        raise UnsupportedModel(
            f"input {v.name!r} has element type {_type_name(v)}, which nnmem does not keep "
            "on a device"
        )
    dims = v.type.tensor_type.shape.dim
    shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
    if any(d is not None and d > 2**31 for d in shape):
        raise OnnxFileError(f"input {v.name!r} declares absurd dimensions {list(shape)}")
    return Input(v.name, dtype, shape)


def _sorted(nodes, available):
    """The nodes in an order where each comes after the producers of its inputs."""
    producer = {}
    for node in nodes:
        for out in filter(None, node.outputs):  # "": an optional output left out
            if out in producer or out in available:
                raise OnnxFileError(f"value {out!r} is made twice (node {node.name!r})")
            producer[out] = node
    waiting = {}
    readers = defaultdict(list)
    for node in nodes:
        needed = {name for name in node.inputs if name and name not in available}
        for name in needed:
            if name not in producer:
                raise OnnxFileError(
                    f"node {node.name!r} ({node.op_type}) reads {name!r}, which no node, "
                    "input or initializer makes"
                )
            readers[name].append(node)
        waiting[id(node)] = len({id(producer[n]) for n in needed})
    ready = deque(n for n in nodes if waiting[id(n)] == 0)
    order = []
    while ready:
        node = ready.popleft()
        order.append(node)
        done = set()
        for out in node.outputs:
            for reader in readers[out]:
                if id(reader) not in done:
                    done.add(id(reader))
                    waiting[id(reader)] -= 1
                    if waiting[id(reader)] == 0:
                        ready.append(reader)
    if len(order) != len(nodes):
        stuck = [n.name for n in nodes if waiting[id(n)] > 0]
        raise OnnxFileError(
            f"the graph has a cycle through node(s) {stuck[:5]}; an ONNX graph must be acyclic"
        )
    return order
