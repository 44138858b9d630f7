"""SINGA's module-level tensor functions (``tensor.add``, ``tensor.sum``, ``tensor.mult``,
``tensor.softmax``, ...), written with the operators, and installed on nnmem.tensor by
nnmem/ops/__init__ (nnmem.tensor sits below the operators and cannot import them): FUNCTIONS
lists them. Tensor's arithmetic methods are these functions too (nnmem/ops/tensor_methods.py).

One difference from SINGA, on purpose: SINGA's ``tensor.add``, ``tensor.mult`` etc. are not
seen by autograd; here they are the differentiable operators, so ``loss = (y - t) * (y - t)``
can be back-propagated. Their values and dtypes are SINGA's (_operands: int32 with int32 stays
int32, int32 with a number or a float tensor becomes float). Comparisons give 0 and 1 in that
dtype (as SINGA's), never a gradient. Functions that take SINGA's output tensor (``ret``,
``out``, ``C``) write the result into its memory, outside autograd (assign).

Only FUNCTIONS' names are installed; as_type and assign are public because Tensor's methods
use them too (``t.as_type``, ``t += u``).
"""

import math
import numbers

import numpy as np

from nnmem import tensor as _tensor
from nnmem.device import get_default_device
from nnmem.ops import broadcast, contraction, pointwise, rearrange, reduce, transform
from nnmem.ops import softmax as _softmax
from nnmem.ops.activation import relu as _relu
from nnmem.ops.activation import sigmoid as _sigmoid
from nnmem.ops.arith import Cast, Scale
from nnmem.ops.linear import matmul
from nnmem.ops.shape import cat
from nnmem.ops.strides import axis_index
from nnmem.tensor import Tensor


def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _operands(op, lhs, rhs):
    """(lhs, rhs, back): the operands as the arithmetic takes them, by SINGA's dtype rules, and
    the dtype its result goes back to (None: the result's own).

        float with float (one dtype)    that dtype
        int32 with a float tensor       the float's dtype (the int32 operand converted first)
        int32 with a number             float32 (SINGA's Python hands every number on as a float)
        int32 with int32                int32: computed in float64, the result truncated back
                                        toward zero (SINGA computes in float32; float64 holds
                                        every int32 exactly, so sums and differences are exact)

    A number is rounded to the dtype of the tensor it meets, as SINGA's C++ casts it (and
    NumPy 2): ``t <= 3.45`` compares float32 values with float32(3.45), which a float32 tensor
    that was given 3.45 holds exactly, not with the double 3.45, which it never equals."""
    for v in (lhs, rhs):
        if not (isinstance(v, Tensor) or _is_number(v)):
            raise TypeError(f"{op}: a tensor and a {type(v).__name__}; give tensors or numbers")
    tensors = [v for v in (lhs, rhs) if isinstance(v, Tensor)]
    if not tensors:
        raise TypeError(f"{op}: two numbers; give at least one tensor")
    floats = [t.dtype for t in tensors if t.dtype.kind == "f"]
    to = back = None
    if len(floats) < len(tensors):  # an int32 operand
        if floats:
            to = floats[0]
        elif len(tensors) == 1:
            to = _tensor.float32
        else:
            to, back = _tensor.float64, _tensor.int32
    lhs, rhs = (_converted(v, to) for v in (lhs, rhs))
    dtype = next(v.dtype for v in (lhs, rhs) if isinstance(v, Tensor))
    lhs, rhs = (v if isinstance(v, Tensor) else float(dtype.type(v)) for v in (lhs, rhs))
    return lhs, rhs, back


def _converted(v, dtype):
    """An int tensor `v` converted to `dtype` (where a dtype is given); any other v as it is."""
    if dtype is None or not isinstance(v, Tensor) or v.dtype.kind == "f":
        return v
    return as_type(v, dtype)


def _result(y, back, ret):
    """y converted back to `back` (when given), then written into SINGA's output `ret`."""
    return _into(ret, y if back is None else as_type(y, back))


def as_type(t, dtype):
    """A new tensor, on t's device, with t's data converted to `dtype` (SINGA also accepts
    'int' and 'float'). Float to int truncates toward zero, as SINGA's AsType does. A device
    operation (a recorded step replays it) and, as SINGA's, outside autograd."""
    dtype = {"int": _tensor.int32, "float": _tensor.float32}.get(dtype, dtype)
    return Cast(_tensor.check_dtype(dtype))(t)


# -- arithmetic and comparisons (also Tensor's operators), by the dtype rules of _operands ---
def add(lhs, rhs, ret=None):
    """lhs + rhs: tensors (broadcast) or a tensor and a number."""
    a, b, back = _operands("add", lhs, rhs)
    if _is_number(b):
        y = pointwise.add_scalar(a, b)
    elif _is_number(a):
        y = pointwise.add_scalar(b, a)
    else:
        y = broadcast.binary("add", a, b)
    return _result(y, back, ret)


def sub(lhs, rhs, ret=None):
    """lhs - rhs: tensors (broadcast) or a tensor and a number."""
    a, b, back = _operands("sub", lhs, rhs)
    if _is_number(b):
        y = pointwise.add_scalar(a, -b)
    elif _is_number(a):
        y = pointwise.add_scalar(Scale(-1.0)(b), a)
    else:
        y = broadcast.binary("sub", a, b)
    return _result(y, back, ret)


def eltwise_mult(lhs, rhs, ret=None):
    """lhs * rhs elementwise: tensors (broadcast) or a tensor and a number."""
    a, b, back = _operands("mul", lhs, rhs)
    if _is_number(b):
        y = Scale(b)(a)
    elif _is_number(a):
        y = Scale(a)(b)
    else:
        y = broadcast.binary("mul", a, b)
    return _result(y, back, ret)


def div(lhs, rhs, ret=None):
    """lhs / rhs: tensors (broadcast), a tensor by a number (times 1/rhs), a number by a tensor.
    int32 by int32 is int32, truncated toward zero (SINGA's; NumPy's would be a float)."""
    a, b, back = _operands("div", lhs, rhs)
    if _is_number(b):
        y = Scale(1.0 / b)(a)
    elif _is_number(a):
        y = Scale(a)(pointwise.reciprocal(b))
    else:
        y = broadcast.div(a, b)
    return _result(y, back, ret)


#: x <how> t is t <MIRRORED[how]> x
MIRRORED = {"gt": "lt", "ge": "le", "lt": "gt", "le": "ge", "eq": "eq"}


def _compare(how):
    def compare(t, x):
        a, b, back = _operands(how, t, x)
        if _is_number(b):
            y = pointwise.compare_scalar(a, how, b)
        elif _is_number(a):
            y = pointwise.compare_scalar(b, MIRRORED[how], a)
        else:
            y = broadcast.compare(a, how, b)
        return _result(y, back, None)

    compare.__name__ = how
    compare.__doc__ = (
        f"1 where t {how} x (tensors, broadcast, or a tensor and a number), else 0: floats "
        "0.0 and 1.0, or int32 for two int32 tensors (SINGA's)."
    )
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


def copy_data_to_from(dst, src, size, dst_offset=0, src_offset=0):
    """Copy `size` elements of src, from its flat element `src_offset` on, into dst from its
    flat element `dst_offset` on (SINGA's CopyDataToFrom); dst's other elements keep their
    values, so dst must have been written unless the copy covers all of it. Returns dst.

    One device copy on dst's device, outside autograd (a recorded step replays it); a src on
    another device comes over through the host first. The dtypes must be equal (SINGA copies
    bytes: an int32 read as a float32 is garbage), and two ranges of one block must not overlap
    (the copy runs forward, element by element)."""
    for name, n in (("size", size), ("dst_offset", dst_offset), ("src_offset", src_offset)):
        if not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"copy_data_to_from: {name} = {n!r}; give an int >= 0")
    if dst.dtype != src.dtype:
        raise TypeError(
            f"copy_data_to_from: {src.dtype} into {dst.dtype}; convert the source first "
            f"(src.as_type(tensor.{dst.dtype}))"
        )
    for name, t, start in (("dst", dst, dst_offset), ("src", src, src_offset)):
        if start + size > t.size():
            raise ValueError(
                f"copy_data_to_from: elements {start} to {start + size} of {name}, which has "
                f"{t.size()}; copy fewer elements or from a smaller offset"
            )
    if src.device is not dst.device:
        flat = _tensor.to_numpy(src).reshape(-1)[src_offset : src_offset + size]
        src, src_offset = _tensor.from_numpy(flat, dst.device), 0
    elif src.block is dst.block and dst_offset - size < src_offset < dst_offset + size:
        raise ValueError(
            "copy_data_to_from: the ranges overlap in one block; copy through a clone (src.clone())"
        )
    copy, d, s = dst.device.kernels.copy, dst_offset, src_offset

    def kernel(dst_, src_, *_):  # (and dst_ again, read, where the copy leaves some of it)
        copy(dst_.reshape(-1)[d : d + size], src_.reshape(-1)[s : s + size])

    dst.device.exec(
        kernel,
        reads=(src,) if size == dst.size() else (src, dst),
        writes=(dst,),
        name=f"copy_data_to_from into {dst._label()}",
    )
    return dst


# -- SINGA's tensor functions -----------------------------------------------------------------
# The pointwise ones are the operators themselves (each a function of one tensor).
exp, log, sqrt, square = pointwise.exp, pointwise.log, pointwise.sqrt, pointwise.square
tanh, sign, ceil = pointwise.tanh, pointwise.sign, pointwise.ceil
abs = pointwise.abs  # noqa: A001 (SINGA's name)
sigmoid, relu = _sigmoid, _relu
einsum, tensordot = contraction.einsum, contraction.tensordot  # nnmem/ops/contraction.py


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


#: the names installed on nnmem.tensor (nnmem/ops/__init__.py: attach_to_tensor)
FUNCTIONS = """
add sub eltwise_mult div gt ge lt le eq exp log sqrt square tanh abs sign sigmoid relu pow
sum average softmax mult reshape transpose concatenate random ones_like bernoulli gaussian
uniform copy_from_numpy copy_data_to_from ceil axpy add_column add_row sum_columns sum_rows
product sizeof contiguous to_host repeat einsum tensordot
""".split()
