"""SINGA's operators that are compositions of others: their gradients come from the parts.

    cross_entropy(x, t)          = -sum(t * log(x)) / N            (x: probabilities)
    binary_cross_entropy(x, t)   = -sum(t log(x + 1e-4) + (1 - t) log(1.0001 - x)) / N
    where(x, y, condition)       = condition * x + (1 - condition) * y
    gemm(A, B, C)                = alpha * A' @ B' + beta * C       (A' = A^T if transA, ...)
    mean, sum, max, min (*tensors)     over any number of tensors, pairwise and broadcast
    prelu(x, slope)              = max(x, 0) + slope * min(x, 0)
    ranking_loss(pos, neg, M)    = sum(max(0, M - pos + neg)) / N
    cossim(a, b)                 = sum(a b) / (|a| |b|) over the last axis
    globalaveragepool(x)         = the mean over every axis after the channels

N is the batch size (x.shape[0]); the 1e-4 shifts are SINGA's, so a probability of exactly 0
or 1 gives a finite loss. Each piece is a real operator (nnmem/ops), so graph mode, liveness,
recomputation and offload see every intermediate tensor; the price is those intermediates,
a few tensors of x's size, where a fused kernel would keep none.
"""

import numpy as np

from nnmem.ops.arith import Scale
from nnmem.ops.broadcast import binary
from nnmem.ops.linear import TransposedMatmul
from nnmem.ops.pointwise import add_scalar, log, pow_scalar, sqrt
from nnmem.ops.reduce import reduce_mean, reduce_sum
from nnmem.tensor import Tensor

__all__ = [
    "add_all",
    "binary_cross_entropy",
    "cossim",
    "cross_entropy",
    "gemm",
    "globalaveragepool",
    "identity",
    "max",
    "mean",
    "min",
    "negative",
    "pow",
    "prelu",
    "ranking_loss",
    "sum",
    "where",
]


def _batch(op, x, t):
    if x.shape != t.shape:
        raise ValueError(
            f"{op}: prediction {x.shape} and target {t.shape} must have the same shape "
            "(one-hot or probability targets)"
        )
    if t.dtype != x.dtype:
        raise TypeError(
            f"{op}: target dtype {t.dtype} differs from the prediction's {x.dtype}; "
            f"copy the target into a {x.dtype} tensor"
        )
    return x.shape[0] if x.ndim() else 1


def cross_entropy(x, t):
    """-sum(t * log(x)) / N for probabilities x (after softmax) and targets t of x's shape."""
    n = _batch("cross_entropy", x, t)
    return Scale(-1.0 / n)(reduce_sum(binary("mul", t, log(x)), keepdims=False).reshape((1,)))


def binary_cross_entropy(x, t):
    """-sum(t log(x + 1e-4) + (1 - t) log(1.0001 - x)) / N (SINGA's shifts)."""
    n = _batch("binary_cross_entropy", x, t)
    positive = binary("mul", t, log(add_scalar(x, 1e-4)))
    negative = binary(
        "mul", add_scalar(Scale(-1.0)(t), 1.0), log(add_scalar(Scale(-1.0)(x), 1.0001))
    )
    total = reduce_sum(binary("add", positive, negative), keepdims=False)
    return Scale(-1.0 / n)(total.reshape((1,)))


def _as_tensor(value, like):
    """value as a tensor of like's dtype: an array or list is copied in, a tensor of another
    dtype (an int32 mask) converted on the host (no gradient flows into a condition)."""
    if isinstance(value, Tensor):
        return value if value.dtype == like.dtype else value.as_type(like.dtype)
    a = np.asarray(value, dtype=like.dtype)
    return Tensor(a.shape, like.device, like.dtype, requires_grad=False).copy_from_numpy(a)


def where(x, y, condition):
    """condition * x + (1 - condition) * y, broadcast (ONNX's Where(condition, x, y)); condition:
    a tensor (float or int32), array or list of 0/1 (or booleans). The gradient flows to x where
    the condition holds, to y elsewhere. Being arithmetic, it needs finite x and y: an inf or
    NaN in the branch not taken still shows (0 * inf is NaN), so mask with a large finite value
    (GPT-2's finfo.min), not -inf."""
    c = _as_tensor(condition, x)
    not_c = add_scalar(Scale(-1.0)(c), 1.0)
    return binary("add", binary("mul", c, x), binary("mul", not_c, y))


def gemm(A, B, C=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    """alpha * A' @ B' + beta * C (C broadcast to the product's shape, optional); A' and B'
    are read transposed in place (linear.TransposedMatmul): no transposed copy is kept."""
    y = TransposedMatmul(transA, transB)(A, B)
    y = y if alpha == 1.0 else Scale(alpha)(y)
    if C is None:
        return y
    return binary("add", y, C if beta == 1.0 else Scale(beta)(C))


def _fold(how, tensors):
    if not tensors:
        raise ValueError(f"{how}: give at least one tensor")
    total = tensors[0]
    for t in tensors[1:]:
        total = binary(how, total, t)
    return total


def sum(*tensors):  # noqa: A001 (SINGA's name)
    """tensors[0] + tensors[1] + ..., broadcast."""
    return _fold("add", tensors)


add_all = sum


def mean(*tensors):
    """(tensors[0] + tensors[1] + ...) / len(tensors), broadcast."""
    return Scale(1.0 / len(tensors))(_fold("add", tensors))


def max(*tensors):  # noqa: A001 (SINGA's name)
    """The elementwise maximum of the tensors (the gradient goes to the first that is largest)."""
    return _fold("max", tensors)


def min(*tensors):  # noqa: A001 (SINGA's name)
    """The elementwise minimum of the tensors."""
    return _fold("min", tensors)


def pow(a, b):  # noqa: A001 (SINGA's name)
    """a ** b: b a tensor (broadcast) or a number."""
    if isinstance(b, Tensor):
        return binary("pow", a, b)
    return pow_scalar(a, b)


def negative(x):
    return Scale(-1.0)(x)


def identity(x):
    """A copy of x."""
    return Scale(1.0)(x)


def prelu(x, slope):
    """x where x > 0, slope * x elsewhere (slope broadcast against x)."""
    zero = _as_tensor(np.zeros((1,) * x.ndim()), x)
    return binary("add", binary("max", x, zero), binary("mul", slope, binary("min", x, zero)))


def ranking_loss(pos, neg, M=0.2):
    """sum(max(0, M - pos + neg)) / N: a positive should score M above its negative."""
    margin = add_scalar(binary("sub", neg, pos), M)
    zero = _as_tensor(np.zeros((1,) * margin.ndim()), margin)
    total = reduce_sum(binary("max", margin, zero), keepdims=False)
    return Scale(1.0 / pos.shape[0])(total.reshape((1,)))


def cossim(a, b):
    """Cosine similarity of the rows (the last axis) of a and b."""
    dot = reduce_sum(binary("mul", a, b), -1, keepdims=False)
    norms = binary("mul", sqrt(reduce_sum(binary("mul", a, a), -1, keepdims=False)),
                   sqrt(reduce_sum(binary("mul", b, b), -1, keepdims=False)))  # fmt: skip
    return binary("div", dot, norms)


def globalaveragepool(x, data_format="channels_first"):
    """The mean over every spatial axis, kept with size 1: (N, C, H, W) -> (N, C, 1, 1)."""
    if data_format == "channels_first":
        return reduce_mean(x, tuple(range(2, x.ndim())), keepdims=True)
    if data_format == "channels_last":
        return reduce_mean(x, tuple(range(1, x.ndim() - 1)), keepdims=True)
    raise ValueError(f"globalaveragepool: data_format {data_format!r}")
