"""SINGA's Tensor methods beyond storage: arithmetic (``t + u``, ``t[1:3]``, ``t += u``), and
``transpose``, ``l2``, ``bernoulli``, ``to_device``, ``copy_from`` and the rest of SINGA's list,
written with the operators. TENSOR_METHODS maps each method's name to its function;
nnmem/ops/__init__ installs them on Tensor (nnmem.tensor sits below the operators and cannot
import them).

The arithmetic operators are SINGA's tensor functions (nnmem/ops/tensor_functions.py), so they
are differentiable: ``loss = (y - t) * (y - t)`` can be back-propagated. Comparisons give 0 and
1 (floats; int32 for two int32 tensors, as SINGA's), never a gradient. ``t == 3.45`` is
elementwise, as SINGA's, but ``t == u`` of two tensors stays Python's identity test (tensors are
dictionary keys: optimizers key their state by the parameter); use ``tensor.eq(t, u)`` for the
elementwise test. In-place arithmetic (``t += u``, ``t /= n``) writes the result into t's own
memory, as SINGA's does, outside autograd.
"""

import numbers

import numpy as np

from nnmem import tensor as _tensor
from nnmem.device import get_default_device
from nnmem.ops import broadcast, transform
from nnmem.ops.arith import Scale
from nnmem.ops.tensor_functions import (
    add,
    as_type,
    assign,
    div,
    eltwise_mult,
    eq,
    ge,
    gt,
    le,
    lt,
    repeat,
    sub,
)
from nnmem.tensor import Tensor


def _inplace(fn):
    def update(self, x):
        return assign(self, fn(self, x))

    return update


def _neg(self):
    return Scale(-1.0)(self)


def _is_number(x):
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _eq(self, x):
    """``t == x``: 1.0 where t equals the number x, else 0.0 (SINGA's); for anything else,
    NotImplemented, so that Python falls back to identity (see the module docstring)."""
    return eq(self, x) if _is_number(x) else NotImplemented


def _ne(self, x):
    """``t != x``: the complement of ``t == x`` (SINGA has none: its ``t != 3.45`` is False)."""
    return sub(1.0, eq(self, x)) if _is_number(x) else NotImplemented


def _getitem(self, key):
    return transform.Slice(key)(self)


# -- SINGA's Tensor methods ---------------------------------------------------------------------
def _values_as(dtype):
    """SWIG's GetFloatValue(n) / GetIntValue(n): the first n elements, flat, in `dtype` (a
    host copy; SINGA's `t.data.GetFloatValue(t.size())` reads a whole tensor)."""

    def read(self, n):
        if not 0 <= n <= self.size():
            raise ValueError(f"asked for {n} values of a tensor of {self.size()}: 0 to size()")
        return _tensor.to_numpy(self).reshape(-1)[:n].astype(dtype)

    return read


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


def _take_over(self, other):
    """Make `self` hold `other`'s data (block, dtype, device); its old block is given back."""
    old = self.block
    self.dtype, self.device = other.dtype, other.device
    self._set_block(other.block)
    old.dec_ref()
    return self


def _to_type(self, dtype):
    """Convert the data to `dtype` in place (SINGA's to_type): the tensor gets a new block."""
    return _take_over(self, as_type(self, dtype))


def _to_device(self, device):
    """Move the data to `device` (its pool gets a new block; the old one is given back). A
    tensor nothing has written yet moves no bytes: it stays unwritten, on `device`."""
    if device is self.device:
        return
    moved = Tensor(self.shape, device, self.dtype, requires_grad=False)
    if self.block.allocated or self.device.recorder is not None:
        moved.copy_from_numpy(_tensor.to_numpy(self))  # (a read while recording: its clear error)
    _take_over(self, moved)


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
        return assign(self, broadcast.binary(op, self, v.reshape(shape)))

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
    "__eq__": _eq,  # the class keeps object's __hash__: setattr does not reset it
    "__ne__": _ne,
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
    "as_type": as_type,
    "AsType": as_type,  # SWIG's name, which SINGA's modules call on `t.data`
    "data_type": lambda self: self.dtype,  # SWIG's: here the NumPy dtype (singa.kFloat32, ...)
    "to_type": _to_type,
    "to_device": _to_device,
    "to_host": _to_host,
    "copy_from": _copy_from,
    "GetFloatValue": _values_as(np.float32),
    "GetIntValue": _values_as(np.int32),
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
