"""SINGA's module-level tensor functions (``tensor.add``, ``tensor.sum``, ``tensor.mult``,
``tensor.softmax``, ...), written with the operators, and installed on nnmem.tensor by
nnmem/ops/__init__ (nnmem.tensor sits below the operators and cannot import them): FUNCTIONS
lists them. Tensor's arithmetic methods are these functions too (nnmem/ops/tensor_methods.py).

One difference from SINGA, on purpose: SINGA's ``tensor.add``, ``tensor.mult`` etc. are not
seen by autograd; here they are the differentiable operators, so ``loss = (y - t) * (y - t)``
can be back-propagated. Their values are SINGA's. Comparisons give float tensors of 0.0 and 1.0
(as SINGA's), never a gradient. Functions that take SINGA's output tensor (``ret``, ``out``,
``C``) write the result into its memory, outside autograd (assign).

Only FUNCTIONS' names are installed; as_type and assign are public because Tensor's methods
use them too (``t.as_type``, ``t += u``).
"""

import math
import numbers

import numpy as np

from nnmem import tensor as _tensor
from nnmem.device import get_default_device
from nnmem.ops import broadcast, pointwise, rearrange, reduce, transform
from nnmem.ops import softmax as _softmax
from nnmem.ops.activation import relu as _relu
from nnmem.ops.activation import sigmoid as _sigmoid
from nnmem.ops.arith import Scale
from nnmem.ops.linear import matmul
from nnmem.ops.shape import cat
from nnmem.ops.strides import axis_index
from nnmem.tensor import Tensor


def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _check_operands(op, *values):
    for v in values:
        if not (isinstance(v, Tensor) or _is_number(v)):
            raise TypeError(f"{op}: a tensor and a {type(v).__name__}; give tensors or numbers")


def _promote(a, b):
    """(a, b) with an int tensor converted to the other's float dtype: SINGA adds an int mask
    to a float one. A host round trip outside autograd (integer tensors carry no gradient)."""
    if a.dtype.kind == "i" and b.dtype.kind == "f":
        return as_type(a, b.dtype), b
    if b.dtype.kind == "i" and a.dtype.kind == "f":
        return a, as_type(b, a.dtype)
    return a, b


def as_type(t, dtype):
    """A new tensor with the data converted to `dtype` (SINGA also accepts 'int' and 'float').
    Float to int truncates toward zero, as SINGA's AsType does."""
    dtype = {"int": _tensor.int32, "float": _tensor.float32}.get(dtype, dtype)
    return _tensor.from_numpy(_tensor.to_numpy(t).astype(_tensor.check_dtype(dtype)), t.device)


# -- arithmetic and comparisons (also Tensor's operators) ----------------------------------
def add(lhs, rhs, ret=None):
    """lhs + rhs: tensors (broadcast) or a tensor and a number."""
    _check_operands("add", lhs, rhs)
    if _is_number(rhs):
        return _into(ret, pointwise.add_scalar(lhs, rhs))
    if _is_number(lhs):
        return _into(ret, pointwise.add_scalar(rhs, lhs))
    return _into(ret, broadcast.binary("add", *_promote(lhs, rhs)))


def sub(lhs, rhs, ret=None):
    """lhs - rhs: tensors (broadcast) or a tensor and a number."""
    _check_operands("sub", lhs, rhs)
    if _is_number(rhs):
        return _into(ret, pointwise.add_scalar(lhs, -rhs))
    if _is_number(lhs):
        return _into(ret, pointwise.add_scalar(Scale(-1.0)(rhs), lhs))
    return _into(ret, broadcast.binary("sub", *_promote(lhs, rhs)))


def eltwise_mult(lhs, rhs, ret=None):
    """lhs * rhs elementwise: tensors (broadcast) or a tensor and a number."""
    _check_operands("mul", lhs, rhs)
    if _is_number(rhs):
        return _into(ret, Scale(rhs)(lhs))
    if _is_number(lhs):
        return _into(ret, Scale(lhs)(rhs))
    return _into(ret, broadcast.binary("mul", *_promote(lhs, rhs)))


def div(lhs, rhs, ret=None):
    """lhs / rhs: tensors (broadcast), a tensor by a number (times 1/rhs), a number by a tensor."""
    _check_operands("div", lhs, rhs)
    if _is_number(rhs):
        return _into(ret, Scale(1.0 / rhs)(lhs))
    if _is_number(lhs):
        return _into(ret, Scale(lhs)(pointwise.reciprocal(rhs)))
    return _into(ret, broadcast.div(*_promote(lhs, rhs)))


def _compare(how):
    def compare(t, x):
        _check_operands(how, t, x)
        if _is_number(x):
            return pointwise.compare_scalar(t, how, x)
        a, b = _promote(t, x)
        return broadcast.compare(a, how, b)

    compare.__name__ = how
    compare.__doc__ = f"1.0 where t {how} x (a tensor, broadcast, or a number), else 0.0."
    return compare


gt, ge, lt, le, eq = (_compare(h) for h in ("gt", "ge", "lt", "le", "eq"))


def _into(ret, value):
    """SINGA's optional output tensor: copy the result into `ret` and return it."""
    if ret is None:
        return value
    assign(ret, value)
    return ret


def assign(t, value):
    """t's bytes = value's (same number of elements), a device copy outside autograd."""
    if value.size() != t.size() or value.dtype != t.dtype:
        raise ValueError(
            f"cannot write a {value.shape} {value.dtype} result into a {t.shape} {t.dtype} tensor"
        )
    return t.copy_data(value)


# -- SINGA's tensor functions -----------------------------------------------------------------
# The pointwise ones are the operators themselves (each a function of one tensor).
exp, log, sqrt, square = pointwise.exp, pointwise.log, pointwise.sqrt, pointwise.square
tanh, sign, ceil = pointwise.tanh, pointwise.sign, pointwise.ceil
abs = pointwise.abs  # noqa: A001 (SINGA's name)
sigmoid, relu = _sigmoid, _relu


def pow(t, x, out=None):  # noqa: A001 (SINGA's name)
    """t ** x for a number x."""
    if not _is_number(x):
        raise TypeError("pow(t, x): x must be a number (tensor exponents are not supported)")
    return _into(out, pointwise.pow_scalar(t, x))


def sum(t, axis=None, out=None):  # noqa: A001 (SINGA's name)
    """The sum over `axis` (an int, a tuple, or None for every axis: a 1-element tensor)."""
    y = reduce.reduce_sum(t, axis, keepdims=False)
    return _into(out, y.reshape((1,)) if axis is None else y)


def average(t, axis=None):
    """The mean over `axis`, without it (as SINGA's Average and NumPy's mean); a float when
    axis is None (as SINGA)."""
    if axis is None:
        return float(_tensor.to_numpy(t).mean())
    return reduce.reduce_mean(t, axis, keepdims=False)


def softmax(t, out=None):
    """Softmax over the last axis of a 1-D or 2-D tensor (SINGA's tensor.softmax)."""
    return _into(out, _softmax.softmax(t, axis=-1))


def mult(A, B, C=None, alpha=1.0, beta=0.0):
    """A @ B for 2-D tensors, or C = alpha * A @ B + beta * C written into C."""
    product = matmul(A, B)
    if C is None:
        return product
    value = Scale(alpha)(product) if alpha != 1.0 else product
    if beta != 0.0:
        value = broadcast.binary("add", value, Scale(beta)(C))
    return _into(C, value)


def reshape(t, shape):
    return t.reshape(tuple(shape))


def transpose(t, axes=None):
    return transform.transpose(t, axes)


def concatenate(tensors, axis):
    return cat(list(tensors), axis)


def random(shape, device=None):
    """A tensor of samples of U[0, 1)."""
    return Tensor(shape, device).uniform(0.0, 1.0)


def axpy(alpha, x, y):
    """y += alpha * x, in place; returns y."""
    return assign(y, add(y, eltwise_mult(alpha, x)))


def add_column(alpha, v, beta, M):
    """Each column m of M becomes alpha * v + beta * m, in place; returns M."""
    column = eltwise_mult(alpha, v.reshape((M.shape[0], 1)))
    return assign(M, broadcast.binary("add", eltwise_mult(beta, M), column))


def add_row(alpha, v, beta, M):
    """Each row m of M becomes alpha * v + beta * m, in place; returns M."""
    row = eltwise_mult(alpha, v.reshape((1, M.shape[1])))
    return assign(M, broadcast.binary("add", eltwise_mult(beta, M), row))


def sum_columns(M):
    """The sum of M's columns: a (rows, 1) tensor."""
    return reduce.reduce_sum(M, 1, keepdims=True)


def sum_rows(M):
    """The sum of M's rows: a (1, columns) tensor."""
    return reduce.reduce_sum(M, 0, keepdims=True)


def repeat(t, repeats, axis=None):
    """Each element repeated `repeats` times along `axis` (NumPy's repeat; the flattened
    tensor when axis is None)."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeat: repeats must be a positive int, not {repeats!r}")
    if axis is None:
        t, axis = t.reshape((t.size(),)), 0
    scales = [1] * t.ndim()
    scales[axis_index("repeat", axis, t.ndim())] = repeats
    return rearrange.upsample(t, "nearest", scales)


def product(shape):
    return math.prod(shape)


def sizeof(dtype):
    return np.dtype(dtype).itemsize


def contiguous(t):
    return t


def to_host(t):
    """A copy of t on the default (host) device."""
    return _tensor.from_numpy(_tensor.to_numpy(t), get_default_device())


def ones_like(t):
    return Tensor(t.shape, t.device, t.dtype, requires_grad=False).set_value(1)


def bernoulli(p, t):
    return t.bernoulli(p)


def gaussian(mean, std, t):
    return t.gaussian(mean, std)


def uniform(low, high, t):
    return t.uniform(low, high)


def copy_from_numpy(data, np_array):
    return data.copy_from_numpy(np_array)


FUNCTIONS = [
    "add",
    "sub",
    "eltwise_mult",
    "div",
    "gt",
    "ge",
    "lt",
    "le",
    "eq",
    "exp",
    "log",
    "sqrt",
    "square",
    "tanh",
    "abs",
    "sign",
    "sigmoid",
    "relu",
    "pow",
    "sum",
    "average",
    "softmax",
    "mult",
    "reshape",
    "transpose",
    "concatenate",
    "random",
    "ones_like",
    "bernoulli",
    "gaussian",
    "uniform",
    "copy_from_numpy",
    "ceil",
    "axpy",
    "add_column",
    "add_row",
    "sum_columns",
    "sum_rows",
    "product",
    "sizeof",
    "contiguous",
    "to_host",
    "repeat",
]
