"""SINGA's C++ tensor functions, as its SWIG module singa_wrap exposes them (SINGA's
src/api/core_tensor.i), written with nnmem's operators: what a SINGA-style operator calls on
``x.data`` (``singa.ReLU(x)``, ``singa.__mul__(dy, mask)``, ``singa.MultFloat(t, 0.5)``). This
module has the elementwise functions, shapes, sums, copies and types; core_matrix.py the
row and column functions, BLAS, softmax and cross-entropy. nnmem.singa_wrap re-exports both
modules' __all__.

Every function hands its work to the device through an operator, so it runs eagerly and is
recorded in a graph-mode step, planned like any other operation. Inside another operator's
forward or backward (a SINGA-style operator's), an operator is a part of that one
(nnmem/operation.py: Operator._run_inside): its kernels carry the enclosing operator's label
and phase, and it records no creator and saves nothing, as SINGA's C++ calls are invisible to
autograd. Called on their own, outside any operator, the functions built on a differentiable
operator are that operator, seen by autograd like ``tensor.add``
(nnmem/ops/tensor_functions.py).

Values and dtypes are SINGA's: tensors broadcast as NumPy's; int32 with int32 stays int32;
comparisons give 0 and 1; DivFloat multiplies by 1/x, as tensor_functions.div does. SINGA's
functions that return nothing in C++ and write a tensor they are given (``Add(a, b, ret)``,
``AddRow(v, M)``, ``SumRows(M, v)``) compute the result with nnmem's operators, then copy it
into that tensor (write_into: one more kernel and a temporary, where SINGA's kernel writes it
directly), and return None, as SWIG's do. Gaussian, Uniform and Bernoulli fill from the host
(nnmem's Tensor.gaussian, ...), so a graph-mode step would replay its first draw: inside a step
use autograd.dropout, whose masks are drawn on the device. SumAsFloat reads on the host.

Not here: the cuDNN and CPU handles (ConvHandle, CudnnBatchNormHandle, ...) and the Cpu*/Gpu*
convolution, pooling, batch-norm and RNN functions. nnmem's own operators compute those
(nnmem/ops/conv.py, pooling.py, batchnorm.py; layers/recurrent.py), called through its layers and
autograd functions.
"""

import numbers

import numpy as np

from nnmem import tensor as _tensor
from nnmem.operation import Operator
from nnmem.ops import broadcast, pointwise, reduce, transform
from nnmem.ops import tensor_functions as tf
from nnmem.ops.activation import relu, sigmoid
from nnmem.ops.rearrange import slice as _slice
from nnmem.ops.shape import cat
from nnmem.tensor import Tensor

# SWIG's DataType enum, as nnmem's dtypes (``t.dtype == singa.kFloat32``).
kFloat32, kFloat16, kInt, kDouble = _tensor.float32, _tensor.float16, _tensor.int32, _tensor.float64


class VecTensor(list):
    """SWIG's std::vector<Tensor>: here a list of tensors (``singa.VecTensor([a, b])``)."""


class DeviceCall(Operator):
    """One device call for a C++ function that no nnmem operator computes as a whole:
    ``kernel(K, *written, *read)``, K the device's kernels. `outputs`: per written tensor, a
    Tensor to write (SINGA's ``ret``), or a shape (a new tensor of `dtype`, by default the
    first input's). Returns the first written tensor. No gradient: SINGA's C++ functions are
    outside autograd. `inplace`: the first output, a new one, may take the first input's
    memory (the kernel reads each element before it writes it)."""

    differentiable = False

    def __init__(self, name, kernel, outputs, inplace=False, dtype=None):
        super().__init__(name)
        self.kernel, self.outputs, self.inplace, self.dtype = kernel, outputs, inplace, dtype

    def forward(self, *xs):
        dtype = self.dtype or xs[0].dtype
        ys = tuple(o if isinstance(o, Tensor) else self.output(o, dtype) for o in self.outputs)
        K, kernel = self.kernels, self.kernel
        self.run(
            lambda *arrays: kernel(K, *arrays),
            reads=xs,
            writes=ys,
            inplace=((ys[0], xs[0]),) if self.inplace else (),
        )
        return ys[0]


# -- checks, and SINGA's output arguments ------------------------------------------------------
def check_tensors(fn, *values):
    for v in values:
        if not isinstance(v, Tensor):
            raise TypeError(
                f"singa.{fn}: takes tensors, not a {type(v).__name__}; with a number call the "
                "...Float function (AddFloat, GTFloat, ...)"
            )


def check_float(fn, *values):
    check_tensors(fn, *values)
    for t in values:
        if t.dtype.kind != "f":
            raise TypeError(f"singa.{fn}: needs float tensors, not {t.dtype}; t.as_type(kFloat32)")


def check_number(fn, x):
    """x as a float, or a TypeError: SWIG's float arguments."""
    if not isinstance(x, numbers.Real) or isinstance(x, bool):
        raise TypeError(f"singa.{fn}: takes a number, not a {type(x).__name__}")
    return float(x)


def write_into(fn, ret, value):
    """ret's bytes = value's (SINGA's output argument), by one copy kernel; returns None."""
    check_tensors(fn, ret)
    if value.size() != ret.size() or value.dtype != ret.dtype:
        raise ValueError(
            f"singa.{fn}: the result is {value.shape} {value.dtype}, the tensor to write "
            f"{ret.shape} {ret.dtype}; give a tensor of the result's size and dtype"
        )
    DeviceCall(fn, lambda K, r, v: K.copy(r.reshape(-1), v.reshape(-1)), [ret])(value)


# -- elementwise: generated from tables, one SWIG name each -------------------------------------
def _of_tensors(fn, compute):
    def apply(a, b):
        check_tensors(fn, a, b)
        return compute(a, b)

    apply.__name__ = apply.__qualname__ = fn
    apply.__doc__ = f"SWIG's {fn}(a, b): two tensors, broadcast ({compute.__name__})."
    return apply


def _with_number(fn, compute):
    def apply(t, x):
        check_tensors(fn, t)
        return compute(t, check_number(fn, x))

    apply.__name__ = apply.__qualname__ = fn
    apply.__doc__ = f"SWIG's {fn}(t, x): a tensor and a number ({compute.__name__})."
    return apply


def _with_ret(fn, compute):
    def apply(a, b, ret):
        write_into(fn, ret, compute(a, b))

    apply.__name__ = apply.__qualname__ = fn
    apply.__doc__ = f"SWIG's {fn}(a, b, ret): ret = {compute.__name__}(a, b); returns None."
    return apply


def _of_a_float(fn, compute):
    def apply(t):
        check_float(fn, t)
        return compute(t)

    apply.__name__ = apply.__qualname__ = fn
    apply.__doc__ = f"SWIG's {fn}(t): {compute.__name__} of each element, a new tensor."
    return apply


def Pow(base, exp):
    """base ** exp, two float tensors, broadcast."""
    check_float("Pow", base, exp)
    return broadcast.Broadcast("pow")(base, exp)


def _pow(t, x):
    """t ** x for a number x (an int32 t is converted to float32 first, as SINGA's)."""
    return pointwise.pow_scalar(t if t.dtype.kind == "f" else tf.as_type(t, kFloat32), x)


#: SWIG's functions of two tensors, broadcast -> the nnmem function each calls
OF_TWO_TENSORS = {
    "__add__": tf.add,
    "__sub__": tf.sub,
    "__mul__": tf.eltwise_mult,
    "__div__": tf.div,
}
OF_TWO_TENSORS.update(__lt__=tf.lt, __le__=tf.le, __gt__=tf.gt, __ge__=tf.ge, __eq__=tf.eq)
#: SWIG's functions of a tensor and a number
WITH_A_NUMBER = {"AddFloat": tf.add, "SubFloat": tf.sub, "MultFloat": tf.eltwise_mult}
WITH_A_NUMBER.update(DivFloat=tf.div, PowFloat=_pow)
WITH_A_NUMBER.update(LTFloat=tf.lt, LEFloat=tf.le, GTFloat=tf.gt, GEFloat=tf.ge, EQFloat=tf.eq)
#: SWIG's functions of one float tensor, elementwise
OF_A_FLOAT = {"ReLU": relu, "Sigmoid": sigmoid}
OF_A_FLOAT.update(
    (name, getattr(pointwise, name.lower()))
    for name in "Abs Exp Log Sqrt Square Sign Erf Tanh Sin Cos Tan Sinh Cosh Asin Acos Atan "
    "Asinh Acosh Atanh Ceil Floor Round RoundE".split()
)
for _table, _make in (
    (OF_TWO_TENSORS, _of_tensors),
    (WITH_A_NUMBER, _with_number),
    (OF_A_FLOAT, _of_a_float),
):
    globals().update((name, _make(name, fn)) for name, fn in _table.items())
#: SWIG's functions that write the result of another one (named here) into `ret`
WITH_RET = {"Add": "__add__", "Sub": "__sub__", "EltwiseMult": "__mul__", "Div": "__div__"}
WITH_RET.update((f"{name}WithRet", name) for name in ("AddFloat", "SubFloat", "DivFloat"))
WITH_RET.update(EltwiseMultFloatWithRet="MultFloat", PowFloatWithRet="PowFloat", PowWithRet="Pow")
globals().update((name, _with_ret(name, globals()[of])) for name, of in WITH_RET.items())


def ReLUBackward(dy, x):
    """dy where x > 0, else 0 (SINGA's ReLU gradient, from its input x): one relu_backward
    kernel, which tests y > 0 (x > 0 exactly where relu(x) > 0); it may write over dy."""
    check_float("ReLUBackward", dy, x)
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise ValueError(f"singa.ReLUBackward: dy {dy.shape} and x {x.shape} differ; give equal")

    def kernel(K, dx_, dy_, x_):
        K.relu_backward(dx_.reshape(-1), dy_.reshape(-1), x_.reshape(-1))

    return DeviceCall("ReLUBackward", kernel, [dy.shape], inplace=True)(dy, x)


# -- shapes -------------------------------------------------------------------------------------
def Reshape(t, shape):
    """A view of t with another shape (no copy)."""
    check_tensors("Reshape", t)
    return t.reshape(tuple(shape))


def Contiguous(t):
    """t as a contiguous tensor: nnmem's always are, so a second tensor on t's bytes."""
    check_tensors("Contiguous", t)
    return t.contiguous()


def Transpose(t, axes):
    """t with its axes permuted (a copy: nnmem tensors are contiguous; SINGA's is a view)."""
    check_tensors("Transpose", t)
    return transform.transpose(t, axes)


def DefaultTranspose(t):
    """t with its axes reversed (SWIG's name for C++'s Transpose(t))."""
    check_tensors("DefaultTranspose", t)
    return transform.transpose(t)


def SliceOn(t, start, end, axis):
    """t's entries start..end-1 along `axis` (a copy)."""
    check_tensors("SliceOn", t)
    return _slice(t, [start], [end], [axis])


def ConcatOn(tensors, axis):
    """The tensors (a VecTensor or a list) joined along `axis`."""
    check_tensors("ConcatOn", *tensors)
    return cat(list(tensors), axis)


# -- sums -----------------------------------------------------------------------------------
def Sum(t, axis):
    """The sum over `axis`, which is dropped (a (rows, cols) matrix gives (cols,) for axis 0)."""
    check_float("Sum", t)
    return reduce.reduce_sum(t, axis, keepdims=False)


def SumAll(t):
    """The sum of every element: a (1,) tensor."""
    check_float("SumAll", t)
    return reduce.reduce_sum(t, None, keepdims=False).reshape((1,))


def SumAsFloat(t):
    """The sum of every element as a Python float, read on the host (not inside a graph step)."""
    check_tensors("SumAsFloat", t)
    return float(_tensor.to_numpy(t).sum(dtype=np.float64))


def Average(t, axis):
    """The mean over `axis`, which is dropped."""
    check_float("Average", t)
    return reduce.reduce_mean(t, axis, keepdims=False)


# -- copies, random fills, types ----------------------------------------------------------------
def CopyDataToFrom(dst, src, num, dst_offset=0, src_offset=0):
    """Copy `num` elements of src, from its flat element src_offset on, into dst from
    dst_offset on (tensor_functions.copy_data_to_from; the order of C++'s arguments, which
    the names in SWIG's declaration swap); returns None."""
    check_tensors("CopyDataToFrom", dst, src)
    tf.copy_data_to_from(dst, src, num, dst_offset, src_offset)


def Gaussian(mean, std, t):
    """Fill t with samples of N(mean, std^2), from the host; returns None."""
    check_float("Gaussian", t)
    t.gaussian(check_number("Gaussian", mean), check_number("Gaussian", std))


def Uniform(low, high, t):
    """Fill t with samples of U[low, high), from the host; returns None."""
    check_float("Uniform", t)
    t.uniform(check_number("Uniform", low), check_number("Uniform", high))


def Bernoulli(p, t):
    """Fill t with 1.0 with probability p, else 0.0, from the host; returns None."""
    check_float("Bernoulli", t)
    t.bernoulli(check_number("Bernoulli", p))


def SizeOf(dtype):
    """Bytes per element of `dtype` (kFloat32: 4)."""
    return np.dtype(dtype).itemsize


__all__ = [
    "Tensor",
    "VecTensor",
    "kFloat32",
    "kFloat16",
    "kInt",
    "kDouble",
    "SizeOf",
    *OF_TWO_TENSORS,
    *WITH_A_NUMBER,
    *OF_A_FLOAT,
    *WITH_RET,
    "Pow",
    "ReLUBackward",
    "Reshape",
    "Contiguous",
    "Transpose",
    "DefaultTranspose",
    "SliceOn",
    "ConcatOn",
    "Sum",
    "SumAll",
    "SumAsFloat",
    "Average",
    "CopyDataToFrom",
    "Gaussian",
    "Uniform",
    "Bernoulli",
]
