"""SINGA's tensor module beyond storage: arithmetic on Tensor objects and the module-level
functions (``tensor.sum``, ``tensor.mult``, ``tensor.softmax``, ...), written with the
operators, and installed on nnmem.tensor by nnmem/ops/__init__ (nnmem.tensor sits below the
operators and cannot import them).

One difference from SINGA, on purpose: SINGA's ``t + u``, ``tensor.mult`` etc. are not seen by
autograd; here they are the differentiable operators, so ``loss = (y - t) * (y - t)`` can be
back-propagated. Their values are SINGA's. Comparisons give float tensors of 0.0 and 1.0 (as
SINGA's), never a gradient. ``t == u`` stays Python's identity test (tensors are dictionary
keys: optimizers key their state by the parameter); use ``tensor.eq(t, u)`` for the elementwise
test. In-place arithmetic (``t += u``, ``t /= n``) writes the result into t's own memory, as
SINGA's does, outside autograd.
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
        return _as_type(a, b.dtype), b
    if b.dtype.kind == "i" and a.dtype.kind == "f":
        return a, _as_type(b, a.dtype)
    return a, b


# -- arithmetic dunders (Tensor methods) ------------------------------------------------------
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
    _assign(ret, value)
    return ret


def _assign(t, value):
    """t's bytes = value's (same number of elements), a device copy outside autograd."""
    if value.size() != t.size() or value.dtype != t.dtype:
        raise ValueError(
            f"cannot write a {value.shape} {value.dtype} result into a {t.shape} {t.dtype} tensor"
        )
    return t.copy_data(value)


def _inplace(fn):
    def update(self, x):
        return _assign(self, fn(self, x))

    return update


def _neg(self):
    return Scale(-1.0)(self)


def _getitem(self, key):
    return transform.Slice(key)(self)


# -- SINGA's Tensor methods ---------------------------------------------------------------------
def _transpose_method(self, axes=None):
    """A new tensor with the axes permuted (reversed by default)."""
    return transform.transpose(self, axes)


def _T(self):
    """The transpose of a 2-D tensor (a copy: nnmem tensors are always contiguous)."""
    return transform.transpose(self)


def _l1(self):
    """SINGA's l1: sum |x| / size (a float)."""
    return float(np.abs(_tensor.to_numpy(self)).sum() / max(self.size(), 1))


def _l2(self):
    """SINGA's l2: sqrt(sum x^2) / size (a float)."""
    return float(np.linalg.norm(_tensor.to_numpy(self).ravel()) / max(self.size(), 1))


def _bernoulli(self, p, inplace=True):
    """Fill with 1.0 with probability p, else 0.0, from the device's generator; returns self."""
    if not inplace:
        raise NotImplementedError("bernoulli(inplace=False) is not in SINGA either")
    if self.dtype.kind != "f":
        raise TypeError(f"bernoulli fills a float tensor, this one is {self.dtype}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"bernoulli: p = {p} is not a probability")
    rng = self.device.rng

    def fill(a):
        a[...] = rng.random(size=a.shape, dtype=np.float32) < p  # bools written as 1.0 / 0.0

    return self._host_write(fill)


def _as_type(self, dtype):
    """A new tensor with the data converted to `dtype` (SINGA also accepts 'int' and 'float').
    Float to int truncates toward zero, as SINGA's AsType does."""
    dtype = {"int": _tensor.int32, "float": _tensor.float32}.get(dtype, dtype)
    return _tensor.from_numpy(
        _tensor.to_numpy(self).astype(_tensor.check_dtype(dtype)), self.device
    )


def _take_over(self, other):
    """Make `self` hold `other`'s data (block, dtype, device); its old block is given back."""
    old = self.block
    self.dtype, self.device = other.dtype, other.device
    self._set_block(other.block)
    old.dec_ref()
    return self


def _to_type(self, dtype):
    """Convert the data to `dtype` in place (SINGA's to_type): the tensor gets a new block."""
    return _take_over(self, _as_type(self, dtype))


def _to_device(self, device):
    """Move the data to `device` (its pool gets a new block; the old one is given back)."""
    if device is self.device:
        return
    data = _tensor.to_numpy(self)
    _take_over(
        self, Tensor(self.shape, device, self.dtype, requires_grad=False).copy_from_numpy(data)
    )


def _to_host(self):
    """Move the data to the default (host) device."""
    _to_device(self, get_default_device())


def _copy_from(self, t, offset=0):
    """Copy a tensor's or an array's data into this tensor."""
    if offset:
        raise ValueError("copy_from(offset=...) is not supported; slice the source instead")
    if isinstance(t, Tensor):
        return self.copy_data(t)
    if isinstance(t, np.ndarray):
        return self.copy_from_numpy(t)
    raise ValueError(f"copy_from takes a Tensor or a NumPy array, not {type(t).__name__}")


def _column_op(how):
    """SINGA's deprecated in-place row/column broadcasts: v along the columns (a column of
    shape (rows, 1)) or the rows (shape (1, cols)) of a 2-D tensor."""
    op, axis = how.split("_")

    def update(self, v):
        shape = (self.shape[0], 1) if axis == "column" else (1, self.shape[1])
        return _assign(self, broadcast.binary(op, self, v.reshape(shape)))

    update.__name__ = how
    return update


def _copy(self):
    """A second tensor on the same bytes (SINGA's shallow copy)."""
    return Tensor._on_block(self.block, self.shape, self.dtype, self.device)


TENSOR_METHODS = {
    "__add__": add,
    "__radd__": lambda self, lhs: add(lhs, self),
    "__sub__": sub,
    "__rsub__": lambda self, lhs: sub(lhs, self),
    "__mul__": eltwise_mult,
    "__rmul__": lambda self, lhs: eltwise_mult(lhs, self),
    "__truediv__": div,
    "__rtruediv__": lambda self, lhs: div(lhs, self),
    "__neg__": _neg,
    "__gt__": gt,
    "__ge__": ge,
    "__lt__": lt,
    "__le__": le,
    "__iadd__": _inplace(add),
    "__isub__": _inplace(sub),
    "__imul__": _inplace(eltwise_mult),
    "__itruediv__": _inplace(div),
    "__getitem__": _getitem,
    "transpose": _transpose_method,
    "T": _T,
    "l1": _l1,
    "l2": _l2,
    "bernoulli": _bernoulli,
    "as_type": _as_type,
    "to_type": _to_type,
    "to_device": _to_device,
    "to_host": _to_host,
    "copy_from": _copy_from,
    "data": property(lambda self: self, doc="SINGA's underlying tensor: here, the tensor itself"),
    "copy": _copy,
    "repeat": lambda self, repeats, axis=None: repeat(self, repeats, axis),
    "deepcopy": lambda self: self.clone(),
    "is_empty": lambda self: self.size() == 0,
    "is_dummy": lambda self: False,  # every nnmem tensor has a shape and a device
    "is_transpose": lambda self: False,  # nnmem tensors are contiguous: transposes copy
    "contiguous": _copy,
    "add_column": _column_op("add_column"),
    "add_row": _column_op("add_row"),
    "div_column": _column_op("div_column"),
    "div_row": _column_op("div_row"),
    "mult_column": _column_op("mul_column"),
    "mult_row": _column_op("mul_row"),
}


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
    return _assign(y, add(y, eltwise_mult(alpha, x)))


def add_column(alpha, v, beta, M):
    """Each column m of M becomes alpha * v + beta * m, in place; returns M."""
    column = eltwise_mult(alpha, v.reshape((M.shape[0], 1)))
    return _assign(M, broadcast.binary("add", eltwise_mult(beta, M), column))


def add_row(alpha, v, beta, M):
    """Each row m of M becomes alpha * v + beta * m, in place; returns M."""
    row = eltwise_mult(alpha, v.reshape((1, M.shape[1])))
    return _assign(M, broadcast.binary("add", eltwise_mult(beta, M), row))


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
    return _bernoulli(t, p)


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
