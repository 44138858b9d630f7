"""SINGA's C++ matrix functions, as singa_wrap exposes them (src/api/core_tensor.i): a vector
along the rows or columns of a matrix, BLAS (Axpy, Mult), softmax and its backward,
cross-entropy and its backward, written with nnmem's operators and kernels. The contract is
core_tensor.py's: one device call or operator each, a part of the SINGA-style operator that
calls it; functions that write a tensor they are given return None.
"""

import math

import numpy as np

from nnmem.ops import broadcast, pointwise, reduce
from nnmem.ops import tensor_functions as tf
from nnmem.ops.arith import Scale
from nnmem.ops.core_tensor import (
    DeviceCall,
    Sum,
    check_float,
    check_number,
    check_tensors,
    kInt,
    write_into,
)
from nnmem.ops.linear import matmul
from nnmem.ops.softmax import softmax
from nnmem.tensor import Tensor

#: The smallest normal float32: SINGA's cross-entropy takes log(max(p, FLT_MIN)), never log(0).
FLT_MIN = float(np.finfo(np.float32).tiny)


# -- a vector along each row or column of a matrix M, written into M ----------------------------
def _matrix(fn, M):
    check_float(fn, M)
    if M.ndim() != 2:
        raise ValueError(f"singa.{fn}: M must be a matrix (2-D), not {M.shape}")
    return M


def _along(fn, v, M, rows):
    """v as a row (1, cols) of M, or a column (rows, 1), to broadcast over M."""
    _matrix(fn, M)
    check_float(fn, v)
    n = M.shape[1] if rows else M.shape[0]
    if v.size() != n:
        raise ValueError(f"singa.{fn}: v has {v.size()} elements; M {M.shape} needs {n}")
    return v.reshape((1, n) if rows else (n, 1))


def _combine_along(fn, how, rows):
    def apply(v, M):
        write_into(fn, M, broadcast.binary(how, M, _along(fn, v, M, rows)))

    apply.__name__ = apply.__qualname__ = fn
    where = "row" if rows else "column"
    apply.__doc__ = f"SWIG's {fn}(v, M): M = M {how} v, v along each {where}; returns None."
    return apply


def _scaled_along(fn, rows):
    def apply(alpha, beta, v, M):
        along = Scale(check_number(fn, alpha))(_along(fn, v, M, rows))
        write_into(fn, M, broadcast.binary("add", Scale(check_number(fn, beta))(M), along))

    apply.__name__ = apply.__qualname__ = fn
    where = "row" if rows else "column"
    apply.__doc__ = f"SWIG's {fn}(alpha, beta, v, M): M = alpha v + beta M, v along each {where}."
    return apply


#: SWIG's name -> (the operation, along each row? else each column)
ALONG = {"AddRow": ("add", True), "AddColumn": ("add", False)}
ALONG.update(SubRow=("sub", True), SubColumn=("sub", False))
ALONG.update(MultRow=("mul", True), MultColumn=("mul", False))
ALONG.update(DivRow=("div", True), DivColumn=("div", False))
globals().update((name, _combine_along(name, how, rows)) for name, (how, rows) in ALONG.items())
AddRowWithScale = _scaled_along("AddRowWithScale", rows=True)
AddColumnWithScale = _scaled_along("AddColumnWithScale", rows=False)


def SumRows(M, v):
    """v = the sum of M's rows (M 2-D: v has M.shape[1] elements); returns None."""
    write_into("SumRows", v, Sum(_matrix("SumRows", M), 0))


def SumColumns(M, v):
    """v = the sum of M's columns (v has M.shape[0] elements); returns None."""
    write_into("SumColumns", v, Sum(_matrix("SumColumns", M), 1))


# -- BLAS ---------------------------------------------------------------------------------------
def Axpy(alpha, x, y):
    """y += alpha * x; alpha a number or a 1-element tensor; returns None."""
    check_tensors("Axpy", x, y)
    alpha = alpha if isinstance(alpha, Tensor) else check_number("Axpy", alpha)
    write_into("Axpy", y, tf.add(y, tf.eltwise_mult(alpha, x)))


def Mult(A, B):
    """A @ B: matrices, a matrix and a vector B (GEMV), or batches broadcast as numpy.matmul."""
    check_float("Mult", A, B)
    if B.ndim() == 1:
        return matmul(A, B.reshape((B.shape[0], 1))).reshape(A.shape[:-1])
    return matmul(A, B)


def MultWithRet(A, B, C):
    """C = A @ B; returns None."""
    write_into("MultWithRet", C, Mult(A, B))


def MultWithScale(alpha, A, B, beta, C):
    """C = alpha * A @ B + beta * C; returns None."""
    alpha, beta = check_number("MultWithScale", alpha), check_number("MultWithScale", beta)
    product = Scale(alpha)(Mult(A, B))
    if beta:
        product = broadcast.binary("add", product, Scale(beta)(C))
    write_into("MultWithScale", C, product)


# -- softmax and cross-entropy ------------------------------------------------------------------
def _rows(fn, t, axis):
    """(rows, n): t viewed as a matrix whose rows join its axes from `axis` on (SINGA's)."""
    if not -t.ndim() <= axis < max(t.ndim(), 1):
        raise ValueError(f"singa.{fn}: axis {axis} for a {t.ndim()}-D tensor")
    axis %= max(t.ndim(), 1)
    return math.prod(t.shape[:axis]), math.prod(t.shape[axis:])


def SoftMax(t, *out_and_axis):
    """SWIG's SoftMax(t), SoftMax(t, axis), SoftMax(t, out), SoftMax(t, out, axis): softmax
    over t's axes from `axis` on, joined (a (2, 3, 4) tensor and axis 1: over 12 elements,
    as ONNX's Softmax before opset 13). No axis: over the last axis of a 1-D or 2-D tensor.
    Given `out`, the result is written into it and None returned."""
    check_float("SoftMax", t)
    out = out_and_axis[0] if out_and_axis and isinstance(out_and_axis[0], Tensor) else None
    axis = out_and_axis[1:] if out is not None else out_and_axis
    if not axis and t.ndim() > 2:
        raise ValueError(f"singa.SoftMax: a {t.shape} tensor needs an axis: SoftMax(t, axis)")
    rows = _rows("SoftMax", t, axis[0] if axis else -1)
    y = softmax(t.reshape(rows), 1).reshape(t.shape)
    return y if out is None else write_into("SoftMax", out, y)


def SoftMaxBackward(dy, axis, y):
    """dx = y * (dy - sum(dy * y)) over the axes from `axis` on (SoftMax's), from its output y:
    one softmax_backward kernel, which may write over dy."""
    check_float("SoftMaxBackward", dy, y)
    if dy.shape != y.shape or dy.dtype != y.dtype:
        raise ValueError(f"singa.SoftMaxBackward: dy {dy.shape} and y {y.shape}; give equal")
    view = _rows("SoftMaxBackward", y, axis) + (1,)

    def kernel(K, dx_, dy_, y_):
        K.softmax_backward(dx_.reshape(view), dy_.reshape(view), y_.reshape(view))

    return DeviceCall("SoftMaxBackward", kernel, [dy.shape], inplace=True)(dy, y)


def _class_ids(fn, p, t):
    """t as (batch,) int32 class ids when it has one per row of p; None for target rows (p's
    shape: one-hot or soft)."""
    check_float(fn, p)
    check_tensors(fn, t)
    if p.ndim() != 2:
        raise ValueError(f"singa.{fn}: p must be (batch, classes), not {p.shape}")
    if t.size() == p.shape[0]:
        if t.dtype != kInt:
            raise TypeError(f"singa.{fn}: class ids of dtype {t.dtype}; give int32 ones")
        return t.reshape((p.shape[0],))
    if t.shape != p.shape:
        raise ValueError(
            f"singa.{fn}: targets {t.shape} for p {p.shape}; give {p.shape[0]} class ids "
            "or a target row per sample"
        )
    return None


def _one_hot(ids, p):
    """The one-hot rows of class ids, in p's shape and dtype, by a kernel that exists already:
    softmax_cross_entropy_backward writes (prob - onehot) * dloss / N, which is onehot for
    prob = 0 and dloss = -N. A class id outside 0..classes-1 raises."""
    n = p.shape[0]

    def kernel(K, hot_, dloss_, ids_):
        K.fill(hot_.reshape(-1), 0.0)
        K.fill(dloss_, -float(n))
        K.softmax_cross_entropy_backward(hot_, dloss_, hot_, ids_)

    return DeviceCall("OneHot", kernel, [p.shape, (1,)], dtype=p.dtype)(ids)


def _target_rows(fn, p, t):
    """Each sample's target distribution q: one-hot rows for class ids, else t / its row sum."""
    ids = _class_ids(fn, p, t)
    if ids is not None:
        return _one_hot(ids, p)
    t = t if t.dtype == p.dtype else tf.as_type(t, p.dtype)
    return broadcast.div(t, reduce.reduce_sum(t, 1, keepdims=True))


def CrossEntropyFwd(p, t):
    """loss[i] = -sum_j q[i, j] log(max(p[i, j], FLT_MIN)), a (batch,) tensor, for
    probabilities p (batch, classes) and targets t: class ids (batch,) int32 (q one-hot), or
    rows of p's shape (q = t / its row sum)."""
    q = _target_rows("CrossEntropyFwd", p, t)
    log_p = pointwise.log(pointwise.clip(p, FLT_MIN))
    return Scale(-1.0)(reduce.reduce_sum(broadcast.binary("mul", q, log_p), 1, keepdims=False))


def SoftmaxCrossEntropyBwd(p, t):
    """p - q (q as in CrossEntropyFwd): the gradient of each sample's cross-entropy of
    p = softmax(x) with respect to x. Class ids take one kernel that computes it already,
    softmax_cross_entropy_backward ((p - onehot) * dloss / N, for dloss = N)."""
    ids = _class_ids("SoftmaxCrossEntropyBwd", p, t)
    if ids is None:
        return broadcast.binary("sub", p, _target_rows("SoftmaxCrossEntropyBwd", p, t))
    n = p.shape[0]

    def kernel(K, dx_, dloss_, p_, ids_):
        K.fill(dloss_, float(n))
        K.softmax_cross_entropy_backward(dx_, dloss_, p_, ids_)

    return DeviceCall("SoftmaxCrossEntropyBwd", kernel, [p.shape, (1,)], inplace=True)(p, ids)


__all__ = [
    *ALONG,
    "AddRowWithScale",
    "AddColumnWithScale",
    "SumRows",
    "SumColumns",
    "Axpy",
    "Mult",
    "MultWithRet",
    "MultWithScale",
    "SoftMax",
    "SoftMaxBackward",
    "CrossEntropyFwd",
    "SoftmaxCrossEntropyBwd",
]
