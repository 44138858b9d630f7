"""ONNX export, SINGA's ``sonnx.to_onnx``: a forward pass, traced, written as an onnx ModelProto.

SINGA walks the creators its autograd records; nnmem records creators only while training
and when a gradient is needed, and a training BatchNorm normalises with the batch's
statistics. So the exporter reads a trace instead (``operation.tracing()``: every operator
call of the block, in the order it ran, whatever the training flag), and exports inference:

    with operation.tracing():              # or sonnx.export(model, x), which does all this
        y = model.forward(x)               # in eval mode
        onnx_model = sonnx.to_onnx([x], [y])

Only the operators the outputs depend on become nodes, in the order they ran (a topological
order). Parameters and states become initializers named by their dotted names (``conv1.W``,
``bn1.running_mean``: what ``model.get_states()`` calls them), the inputs graph inputs, and the
first dimension of the inputs (and of each output of the same size) the symbol "batch", so the
model takes any batch size. An operator with no ONNX form is an ExportError naming its class
and its layer. The target is ONNX opset 17 (onnxruntime runs it).
"""

import numpy as np
import onnx
from onnx import helper, numpy_helper

from nnmem import operation
from nnmem.ops.activation import ReLU, Sigmoid
from nnmem.ops.arith import Add, Cast, Mul, Reshape, Scale, Sub
from nnmem.ops.batchnorm import BatchNorm2d
from nnmem.ops.broadcast import Broadcast
from nnmem.ops.conv import Conv2d
from nnmem.ops.dropout import Dropout
from nnmem.ops.embedding import Embedding
from nnmem.ops.layernorm import LayerNorm
from nnmem.ops.linear import AddBias, Matmul, TransposedMatmul
from nnmem.ops.lrn import LRN
from nnmem.ops.pointwise import Pointwise
from nnmem.ops.pooling import Pooling2d
from nnmem.ops.reduce import Sum
from nnmem.ops.shape import Cat, Flatten
from nnmem.ops.softmax import SoftMax
from nnmem.ops.transform import Transpose
from nnmem.tensor import Tensor, to_numpy

__all__ = ["ExportError", "SingaFrontend", "export", "to_onnx"]

#: The ONNX opset the nodes are written for.
OPSET = 17
#: The name of the symbolic batch dimension.
BATCH = "batch"


class ExportError(ValueError):
    """A traced forward that has no ONNX form: an unmapped operator, a missing trace."""


class SingaFrontend:
    """SINGA's converter from a forward pass to ONNX (``to_onnx`` is its singa_to_onnx_model)."""

    @classmethod
    def singa_to_onnx_model(cls, inputs, y, model_name="sonnx", trace=None, dynamic_batch=True):
        """ONNX ModelProto of the forward pass from `inputs` (a list of Tensors) to `y` (a list
        of Tensors), as recorded by `trace` (a list from ``operation.tracing()``; by default
        the block this call runs in). dynamic_batch: the first dimension of the inputs, and of
        each output whose first dimension has the same size, is the symbol "batch" (else the
        traced sizes). The model passes onnx.checker.check_model."""
        graph = cls.singa_to_onnx_graph(inputs, y, model_name, trace, dynamic_batch)
        opsets = [helper.make_opsetid("", OPSET)]
        model = helper.make_model(
            graph,
            producer_name="nnmem",
            opset_imports=opsets,
            # the oldest IR that has the opset: the most runtimes can read it
            ir_version=helper.find_min_ir_version_for(opsets),
        )
        onnx.checker.check_model(model)
        return model

    @classmethod
    def singa_to_onnx_graph(cls, inputs, y, model_name="sonnx", trace=None, dynamic_batch=True):
        """The GraphProto of singa_to_onnx_model."""
        inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        outputs = [y] if isinstance(y, Tensor) else list(y)
        trace = operation.active_trace() if trace is None else trace
        if trace is None:
            raise ExportError(
                "to_onnx: no trace of the forward pass; run the forward inside "
                "`with operation.tracing():`, or use sonnx.export(model, x)"
            )
        return _GraphBuilder(inputs, outputs, trace, dynamic_batch).build(model_name)


to_onnx = SingaFrontend.singa_to_onnx_model


def export(model, x, path=None, model_name=None, dynamic_batch=True):
    """Run ``model.forward(x)`` in eval mode under tracing() and return its ONNX ModelProto
    (written to `path` with onnx.save when given). x: a Tensor, or a list of them (forward's
    arguments). The model's parameters and running statistics are not changed, and its
    training mode is restored."""
    if not getattr(model, "initialized", True):
        raise ExportError(
            f"export: {type(model).__name__} has no parameters yet; "
            "call model.compile([x], is_train=False) first"
        )
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    was_training, flag = model.training, operation.is_training()
    model.eval()
    try:
        with operation.tracing() as trace:
            y = model.forward(*xs)
    finally:
        model.train(was_training)
        operation.set_training(flag)
    model.get_states()  # names every parameter and state by its dotted path from the model
    outputs = list(y) if isinstance(y, (list, tuple)) else [y]
    onnx_model = to_onnx(
        xs, outputs, model_name or type(model).__name__, trace=trace, dynamic_batch=dynamic_batch
    )
    if path is not None:
        onnx.save(onnx_model, path)
    return onnx_model


class _GraphBuilder:
    """Names every tensor and collects the nodes, initializers and graph inputs and outputs."""

    def __init__(self, inputs, outputs, trace, dynamic_batch):
        self.inputs, self.outputs, self.trace = inputs, outputs, trace
        self.batch = inputs[0].shape[0] if dynamic_batch and inputs and inputs[0].shape else None
        self.names, self.used = {}, set()  # id(tensor) -> its name; every name given
        self.nodes, self.initializers = [], []
        # Which call made each tensor. An operator that returns its input (Dropout when not
        # training) makes nothing: the tensor keeps its maker, and the call needs no node.
        self.maker = {}
        for i, (_, xs, ys) in enumerate(trace):
            for t in ys:
                if not any(t is x for x in xs):
                    self.maker[id(t)] = i

    def build(self, model_name):
        for i, t in enumerate(self.inputs):
            self.names[id(t)] = self._unique(
                t.name or ("input" if len(self.inputs) == 1 else f"input{i}")
            )
        graph_inputs = [self._value_info(self.names[id(t)], t) for t in self.inputs]
        out_names = [
            "output" if len(self.outputs) == 1 else f"output{i}" for i in range(len(self.outputs))
        ]
        copies = []  # outputs no node of theirs writes: an input, a constant, a repeat
        for t, name in zip(self.outputs, out_names):
            if id(t) in self.maker and id(t) not in self.names:
                self.names[id(t)] = self._unique(name)
            else:
                copies.append((t, self._unique(name)))
        for i in self._needed():
            op, xs, ys = self.trace[i]
            convert = CONVERTERS.get(type(op))
            if convert is None:
                raise ExportError(
                    f"to_onnx: operator {type(op).__name__} (in {op.label!r}) has no ONNX "
                    f"mapping; the exporter maps {', '.join(sorted(MAPPED))}"
                )
            self.op = op
            convert(self, op, xs, ys)
        for t, name in copies:
            self.nodes.append(helper.make_node("Identity", [self.name(t)], [name], name=name))
        graph_outputs = [self._value_info(n, t) for t, n in zip(self.outputs, out_names)]
        return helper.make_graph(
            self.nodes, model_name, graph_inputs, graph_outputs, self.initializers
        )

    def _needed(self):
        """Indices of the traced calls the outputs depend on, in the order they ran."""
        needed, stack = set(), list(self.outputs)
        inputs = {id(t) for t in self.inputs}
        while stack:
            t = stack.pop()
            i = self.maker.get(id(t))
            if id(t) in inputs or i is None or i in needed:
                continue
            needed.add(i)
            stack.extend(self.trace[i][1])
        for k, t in enumerate(self.outputs):
            if id(t) not in inputs and id(t) not in self.maker:
                raise ExportError(
                    f"to_onnx: output {k} {t.shape} was not computed inside the trace; run the "
                    "whole forward pass inside `with operation.tracing():`"
                )
        return sorted(needed)

    # -- what the converters call ---------------------------------------------------------------
    def name(self, t):
        """The name of tensor t; a tensor nothing traced made (a parameter, a state, a
        constant) becomes an initializer, named by its dotted name when it has one."""
        key = id(t)
        if key not in self.names:
            if key in self.maker:  # an operator's output: named after it
                op, _, ys = self.trace[self.maker[key]]
                index = next(k for k, y in enumerate(ys) if y is t)
                base = op.label if len(ys) == 1 else f"{op.label}:{index}"
                self.names[key] = self._unique(base)
            else:
                self.names[key] = self._unique(t.name or "constant")
                self.initializers.append(numpy_helper.from_array(to_numpy(t), self.names[key]))
        return self.names[key]

    def constant(self, array, base):
        """An initializer holding `array` (an attribute ONNX takes as an input: a shape)."""
        name = self._unique(f"{self.op.label}:{base}")
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op_type, inputs, outputs, **attributes):
        """Add a node; inputs and outputs are Tensors or names."""
        ins = [i if isinstance(i, str) else self.name(i) for i in inputs]
        outs = [self.name(o) for o in outputs]
        name = self._unique(self.op.label + ":node")
        self.nodes.append(helper.make_node(op_type, ins, outs, name=name, **attributes))

    def _unique(self, base):
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def _value_info(self, name, t):
        dims = list(t.shape)
        if self.batch is not None and dims and dims[0] == self.batch:
            dims[0] = BATCH
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), dims)


# -- the converters: (builder, operator, input tensors, output tensors) -> nodes ---------------


def _same(op_type):
    """An operator that is the ONNX one of that name, inputs and outputs alike."""

    def convert(b, op, xs, ys):
        b.node(op_type, xs, ys)

    return convert


def _conv(b, op, xs, ys):
    """nnmem's pads are ONNX's order: top, left, bottom, right."""
    kernel = list(xs[1].shape[2:])
    b.node("Conv", xs, ys, kernel_shape=kernel, strides=list(op.stride), pads=list(op.pads),
           dilations=list(op.dilation), group=op.group)  # fmt: skip


def _pool(b, op, xs, ys):
    """nnmem's max pooling never picks the padding; its average divides by the whole window
    (count_include_pad=1, nnmem's default) or by the real elements in it (0, ONNX's)."""
    window = dict(kernel_shape=list(op.kernel), strides=list(op.stride), pads=list(op.pads),
                  ceil_mode=int(op.ceil_mode))  # fmt: skip
    if op.is_max:
        b.node("MaxPool", xs, ys, **window)
    else:
        b.node("AveragePool", xs, ys, count_include_pad=int(op.count_include_pad), **window)


def _batchnorm(b, op, xs, ys):
    """Inference: the running statistics, initializers like the parameters."""
    x, scale, bias = xs
    inputs = [x, scale, bias, op.running_mean, op.running_var]
    b.node("BatchNormalization", inputs, ys, epsilon=op.eps, momentum=op.momentum)


def _lrn(b, op, xs, ys):
    """Both divide by (k + alpha/size * sum of squares)^beta; ONNX's window starts
    (size - 1) // 2 channels before c, nnmem's `before` channels (the same for odd sizes)."""
    if op.before != (op.size - 1) // 2:
        raise ExportError(
            f"to_onnx: LRN (in {op.label!r}) of size {op.size} has its window {op.before} "
            f"channels before c; ONNX's LRN has it {(op.size - 1) // 2}"
        )
    b.node("LRN", xs, ys, size=op.size, alpha=op.alpha, beta=op.beta, bias=op.k)


def _gemm(b, op, xs, ys):
    b.node("Gemm", xs, ys, transA=int(op.trans_a), transB=int(op.trans_b))


def _reduce(b, op, xs, ys):
    """ReduceSum (its axes an input since opset 13) or ReduceMean (an attribute until opset
    18) over the axes the traced forward summed, all by default."""
    axes = list(range(len(xs[0].shape)) if op.axes is None else np.atleast_1d(op.axes).tolist())
    keepdims = int(op.keepdims)
    if op.mean:
        b.node("ReduceMean", xs, ys, axes=axes, keepdims=keepdims)
    else:
        b.node("ReduceSum", [xs[0], b.constant(np.array(axes, np.int64), "axes")], ys,
               keepdims=keepdims)  # fmt: skip


def _embedding(b, op, xs, ys):
    """Rows of the table W picked by the int32 ids: Gather(W, ids) along axis 0."""
    ids, table = xs
    b.node("Gather", [table, ids], ys, axis=0)


def _layer_norm(b, op, xs, ys):
    b.node("LayerNormalization", xs, ys, axis=op.axis, epsilon=op.epsilon)


def _reshape(b, op, xs, ys):
    """The traced shape, its first dimension 0 ("as the input's") when the reshape keeps it,
    so that a batch-preserving reshape takes any batch size."""
    dims = list(ys[0].shape)
    if dims and xs[0].shape and dims[0] == xs[0].shape[0]:
        dims[0] = 0
    b.node("Reshape", [xs[0], b.constant(np.array(dims, np.int64), "shape")], ys)


def _scale(b, op, xs, ys):
    b.node("Mul", [xs[0], b.constant(np.array(op.alpha, xs[0].dtype), "alpha")], ys)


def _cast(b, op, xs, ys):
    to = helper.np_dtype_to_tensor_dtype(np.dtype(op.dtype))
    b.node("Cast", xs, ys, to=int(to))


def _broadcast(b, op, xs, ys):
    names = dict(add="Add", sub="Sub", mul="Mul", div="Div", pow="Pow", max="Max", min="Min")
    if op.how not in names:  # comparisons give floats in nnmem, booleans in ONNX
        raise ExportError(
            f"to_onnx: operator Broadcast({op.how}) (in {op.label!r}) has no ONNX mapping; "
            f"the exporter maps {', '.join(names)}"
        )
    b.node(names[op.how], xs, ys)


#: nnmem's pointwise functions that are ONNX operators of the same meaning and no attribute.
POINTWISE = dict(tanh="Tanh", exp="Exp", log="Log", sqrt="Sqrt", abs="Abs", erf="Erf")
POINTWISE.update(reciprocal="Reciprocal", sin="Sin", cos="Cos", tan="Tan", sinh="Sinh")
POINTWISE.update(cosh="Cosh", asin="Asin", acos="Acos", atan="Atan", asinh="Asinh")
POINTWISE.update(acosh="Acosh", atanh="Atanh", softplus="Softplus", softsign="Softsign")
POINTWISE.update(ceil="Ceil", floor="Floor")


def _pointwise(b, op, xs, ys):
    if op.fn not in POINTWISE:
        raise ExportError(
            f"to_onnx: operator Pointwise({op.fn}) (in {op.label!r}) has no ONNX mapping; "
            f"the exporter maps {', '.join(sorted(POINTWISE))}"
        )
    b.node(POINTWISE[op.fn], xs, ys)


#: Operator class (exactly: Flatten is a Reshape, but not exported as one) -> its converter.
CONVERTERS = {
    Conv2d: _conv,
    Pooling2d: _pool,
    BatchNorm2d: _batchnorm,
    LRN: _lrn,
    ReLU: _same("Relu"),
    Sigmoid: _same("Sigmoid"),
    Dropout: _same("Identity"),  # traced while training; at inference y = x
    Matmul: _same("MatMul"),
    TransposedMatmul: _gemm,
    LayerNorm: _layer_norm,
    Sum: _reduce,
    Embedding: _embedding,
    AddBias: _same("Add"),  # x (n, f) + b (f,): ONNX broadcasts b over the rows
    Add: _same("Add"),
    Sub: _same("Sub"),
    Mul: _same("Mul"),
    Scale: _scale,
    Cast: _cast,
    Reshape: _reshape,
    Broadcast: _broadcast,
    Flatten: lambda b, op, xs, ys: b.node("Flatten", xs, ys, axis=op.axis),
    Cat: lambda b, op, xs, ys: b.node("Concat", xs, ys, axis=op.axis),
    SoftMax: lambda b, op, xs, ys: b.node("Softmax", xs, ys, axis=op.axis),
    Transpose: lambda b, op, xs, ys: b.node("Transpose", xs, ys, perm=list(op.perm)),
    Pointwise: _pointwise,
}
MAPPED = [c.__name__ for c in CONVERTERS]
