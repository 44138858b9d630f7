"""Converters of the elementwise operators: activations, unary functions, arithmetic with
NumPy broadcasting, comparisons, the logical And/Or/Xor/Not, Where, Sum/Mean/Max/Min, Cast and
Identity.

nnmem's arithmetic runs on float tensors of one dtype (integers live on a device as int32 ids
and labels, which only Add, Sub and Mul of equal shapes, and Identity, take): a converter
refuses anything else at its first run with the dtypes named, rather than fail in a kernel."""

import numpy as np
from onnx import helper

from nnmem import autograd
from nnmem.ops.broadcast import binary, compare
from nnmem.sonnx.converters import converts
from nnmem.sonnx.dtypes import device_dtype

#: ONNX unary operators and nnmem's function of the same meaning.
UNARY = {
    "Relu": autograd.relu, "Sigmoid": autograd.sigmoid, "Tanh": autograd.tanh,
    "Exp": autograd.exp, "Log": autograd.log, "Sqrt": autograd.sqrt, "Erf": autograd.erf,
    "Abs": autograd.abs, "Neg": autograd.negative, "Reciprocal": autograd.reciprocal,
    "Sign": autograd.sign, "Ceil": autograd.ceil, "Floor": autograd.floor,
    "Round": autograd.rounde,
    "Softplus": autograd.softplus, "Softsign": autograd.softsign, "Sin": autograd.sin,
    "Cos": autograd.cos, "Tan": autograd.tan, "Sinh": autograd.sinh, "Cosh": autograd.cosh,
    "Asin": autograd.asin, "Acos": autograd.acos, "Atan": autograd.atan,
    "Asinh": autograd.asinh, "Acosh": autograd.acosh, "Atanh": autograd.atanh,
    "Identity": autograd.identity,
}  # fmt: skip
#: ONNX binary arithmetic -> broadcast.binary's name.
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}
#: ONNX comparisons and logical operators -> broadcast.compare's name (results of 0.0 and 1.0,
#: no gradient; booleans live on a device as float masks of 0.0 and 1.0).
COMPARE = {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le",
           "GreaterOrEqual": "ge", "And": "and", "Or": "or", "Xor": "xor"}  # fmt: skip
#: The operators whose integer operands nnmem's kernels take (equal shapes only).
INTEGER_SAME_SHAPE = ("Add", "Sub", "Mul")


def floats(call, *xs):
    """Refuse operands that are not float tensors of one dtype (see the module's docstring)."""
    dtypes = sorted({str(x.dtype) for x in xs if x is not None})
    if len(dtypes) > 1 or np.dtype(dtypes[0]).kind != "f":
        raise call.fail(
            f"operands of dtype {' and '.join(dtypes)} (integers are kept as int32): nnmem "
            "computes it on float tensors of one dtype only"
        )


@converts(*UNARY)
def unary(call, x):
    if call.node.op_type != "Identity":
        floats(call, x)
    return UNARY[call.node.op_type](x)


@converts(*BINARY, attributes=("axis", "broadcast", "consumed_inputs"))
def arithmetic(call, a, b):
    """a <op> b with NumPy broadcasting (opset 7 on; the older `axis`/`broadcast` is read only
    where it means the same)."""
    if call.attr("axis") is not None and b.ndim() not in (0, 1, a.ndim()):
        raise call.fail("the legacy `axis` broadcast of opsets before 7 is not supported")
    if not (call.node.op_type in INTEGER_SAME_SHAPE and a.shape == b.shape and a.dtype == b.dtype):
        floats(call, a, b)
    return binary(BINARY[call.node.op_type], a, b)


@converts(*COMPARE)
def comparison(call, a, b):
    floats(call, a, b)
    return compare(a, COMPARE[call.node.op_type], b)


@converts("Sum", "Mean", "Max", "Min", attributes=("consumed_inputs",))
def variadic(call, *xs):
    """Sum / Mean / Max / Min of any number of broadcast inputs."""
    floats(call, *xs)
    fold = {"Sum": autograd.sum, "Mean": autograd.mean, "Max": autograd.max, "Min": autograd.min}
    return fold[call.node.op_type](*xs)


@converts("Where")
def where(call, condition, x, y):
    """condition ? x : y (broadcast): the gradient flows to x where it holds, to y elsewhere.

    nnmem's where is arithmetic, c * x + (1 - c) * y, where 0 * inf is NaN: an infinite
    constant branch (an attention mask's -inf) becomes the largest finite value of its sign,
    which a following Softmax turns into the same zero (a row masked everywhere excepted)."""
    floats(call, x, y)
    return autograd.where(_finite(call, 1, x), _finite(call, 2, y), condition)


def _finite(call, index, t):
    """Input `index` (the Tensor t) with infinities made finite, when it is a constant."""
    name = call.node.inputs[index]
    value = call.rep.graph.constants.get(name)
    if not isinstance(value, np.ndarray) or not np.isinf(value).any():
        return t
    info = np.finfo(value.dtype)
    finite = np.clip(value, info.min, info.max)
    return call.rep.constant_tensor(f"{name}:finite", finite, learned=False)


@converts("Clip", attributes=("min", "max"), static=(1, 2))
def clip(call, x, low=None, high=None):
    """Clip to [min, max] (attributes before opset 11, inputs since)."""
    floats(call, x)
    low = call.attr("min") if low is None else float(low)
    high = call.attr("max") if high is None else float(high)
    return autograd.clip(x, low, high)


@converts("LeakyRelu", "Elu", "Selu", "HardSigmoid", attributes=("alpha", "beta", "gamma"))
def parametric(call, x):
    """The activations with parameters, at ONNX's defaults."""
    floats(call, x)
    kind = call.node.op_type
    if kind == "LeakyRelu":
        return autograd.leakyrelu(x, call.attr("alpha", 0.01))
    if kind == "Elu":
        return autograd.elu(x, call.attr("alpha", 1.0))
    if kind == "Selu":
        return autograd.selu(x, call.attr("alpha", 1.67326319217681884765625),
                             call.attr("gamma", 1.05070102214813232421875))  # fmt: skip
    return autograd.hardsigmoid(x, call.attr("alpha", 0.2), call.attr("beta", 0.5))


@converts("Not")
def logical_not(call, x):
    floats(call, x)
    return autograd._not(x)


@converts("HardSwish", "Mish")
def self_gated(call, x):
    """x times a gate of itself: HardSwish's hardsigmoid(x; 1/6, 1/2), Mish's
    tanh(softplus(x)); the gradient flows through both factors."""
    floats(call, x)
    if call.node.op_type == "HardSwish":
        gate = autograd.hardsigmoid(x, 1.0 / 6.0, 0.5)
    else:
        gate = autograd.tanh(autograd.softplus(x))
    return binary("mul", x, gate)


@converts("PRelu")
def prelu(call, x, slope):
    """x where x > 0, slope * x elsewhere. Before opset 7 a slope of C values is per channel
    (axis 1); since, it broadcasts as NumPy does."""
    floats(call, x, slope)
    if call.opset < 7 and slope.ndim() == 1 and slope.shape[0] > 1 and x.ndim() > 2:
        slope = autograd.reshape(slope, slope.shape + (1,) * (x.ndim() - 2))
    return autograd.prelu(x, slope)


@converts("Cast", attributes=("to", "saturate", "round_mode"))
def cast(call, x):
    """Cast on the device: only to the tensor's own dtype (a copy-free identity). Casts of
    shapes, masks and ids run on the host, folded at import or computed from shapes."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(call.attr("to")))
    if dtype != np.bool_ and device_dtype(dtype) == x.dtype:  # to bool: values become 0 / 1
        return x
    raise call.fail(f"a cast of a device tensor from {x.dtype} to {dtype} is not supported")
