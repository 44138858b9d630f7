"""SINGA's operators whose results are data, not gradients: shape, constant_of_shape,
nonzero, cast, onehot, and the logical and/or/xor/not.

They carry no gradient (the result is an integer, a shape or a mask; cast to a float tensor's
own dtype, a copy, is the exception), so each is computed on
the host from the tensor's values, as SINGA's are, and returned as a new tensor: they cannot be
recorded into a graph (they need the values), so call them outside a recorded step or on data
that is known before it (masks, labels).
"""

import numpy as np

from nnmem.operation import Operator
from nnmem.ops.arith import Scale
from nnmem.ops.broadcast import compare
from nnmem.ops.pointwise import compare_scalar
from nnmem.tensor import Tensor, from_numpy, to_numpy

__all__ = ["_and", "_not", "_or", "_xor", "cast", "constant_of_shape", "nonzero", "onehot", "shape"]


class Shape(Operator):
    """x's shape as a 1-D int32 tensor. Its gradient is zero: recorded, no gradient flows through
    it (Operator.gradient_is_zero). Its backward returns what SINGA's does, dy's shape as a list
    of ints, which SINGA's tests read."""

    gradient_is_zero = True

    def forward(self, x):
        return from_numpy(np.array(x.shape, np.int32), x.device)

    def backward(self, dy):
        return list(dy.shape)


def shape(x):
    """x's shape as a 1-D int32 tensor."""
    return Shape()(x)


def constant_of_shape(x, value=0):
    """A float32 tensor of the shape held in the 1-D tensor x, filled with `value`."""
    dims = to_numpy(x).astype(np.int64).tolist()
    if any(d < 0 for d in dims):
        raise ValueError(f"constant_of_shape: negative sizes {dims}")
    return Tensor(tuple(dims), x.device, requires_grad=False).set_value(value)


def nonzero(x):
    """The indices of the nonzero elements, (rank, count) int32 as ONNX's NonZero."""
    return from_numpy(np.array(np.nonzero(to_numpy(x)), np.int32), x.device)


def cast(x, to):
    """x converted to dtype `to` (a new tensor). A cast of a float tensor to its own dtype (ONNX
    graphs have them) is a copy by an operator, so the gradient flows through it; any other
    cast is the device's Cast operator, with no gradient (an integer mask to float, float32 to
    float64)."""
    singa_name = isinstance(to, str) and to in ("int", "float")  # 'float' is float32 here
    if not singa_name and x.dtype.kind == "f" and np.dtype(to) == x.dtype:
        return Scale(1.0)(x)
    return x.as_type(to)


def onehot(axis, indices, depth, values):
    """ONNX's OneHot: a new axis of size `depth` at `axis`, values[1] at each index (negative
    indices count from depth), values[0] elsewhere."""
    ids = to_numpy(indices).astype(np.int64)
    depth = int(np.asarray(depth).reshape(-1)[0])  # ONNX's (and SINGA's tests') is an array
    axis = axis if axis >= 0 else axis + ids.ndim + 1
    positions = np.arange(depth).reshape((1,) * axis + (depth,) + (1,) * (ids.ndim - axis))
    hot = np.expand_dims(np.mod(ids, depth), axis) == positions
    off, on = float(values[0]), float(values[1])
    return from_numpy(np.where(hot, on, off).astype(np.float32), indices.device)


def _and(a, b):
    return compare(a, "and", b)


def _or(a, b):
    return compare(a, "or", b)


def _xor(a, b):
    return compare(a, "xor", b)


def _not(x):
    """1.0 where x is zero, else 0.0."""
    return compare_scalar(x, "eq", 0.0)
