"""Converters of the dense operators: Gemm, MatMul, Softmax, LogSoftmax,
LayerNormalization and Gelu (the layers of classifiers' heads and of transformers)."""

import math

from nnmem import autograd
from nnmem.sonnx.converters import converts


@converts("Gemm", attributes=("alpha", "beta", "transA", "transB", "broadcast"))
def gemm(call, a, b, c=None):
    """Gemm: y = alpha * A' B' + beta * C (C broadcast)."""
    return autograd.gemm(
        a, b, c, call.attr("alpha", 1.0), call.attr("beta", 1.0),
        call.attr("transA", 0), call.attr("transB", 0),
    )  # fmt: skip


@converts("MatMul")
def matmul(call, a, b):
    """MatMul, numpy.matmul's broadcasting (a transformer's (B, S, K) @ (K, N)); a 1-D operand
    is a row (a) or a column (b) for the product, and its axis is dropped from the result."""
    row, column = a.ndim() == 1, b.ndim() == 1
    a = autograd.reshape(a, (1, a.shape[0])) if row else a
    b = autograd.reshape(b, (b.shape[0], 1)) if column else b
    y = autograd.matmul(a, b)
    if not (row or column):
        return y
    shape = y.shape[:-2] + y.shape[-2:][row : 2 - column]  # drop the promoted axes
    return autograd.reshape(y, shape)


@converts("Softmax", "LogSoftmax", attributes=("axis",))
def softmax(call, x):
    """Softmax along `axis` (opset 13 on: one axis, default -1; before: the input flattened
    to 2-D at `axis`, default 1, and normalised over the second dimension)."""
    if call.opset >= 13:
        y = autograd.softmax(x, call.attr("axis", -1))
    else:
        axis = call.attr("axis", 1) % max(x.ndim(), 1)
        rows = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
        y = autograd.reshape(autograd.softmax(autograd.reshape(x, rows), 1), x.shape)
    return autograd.log(y) if call.node.op_type == "LogSoftmax" else y


@converts("LayerNormalization", attributes=("axis", "epsilon", "stash_type"), opsets=(17, 23))
def layer_norm(call, x, scale, bias=None):
    """LayerNormalization over the axes from `axis` (default -1) to the last."""
    if len([o for o in call.node.outputs if o]) > 1:
        raise call.fail("the Mean and InvStdDev outputs of LayerNormalization are not supported")
    return autograd.layer_norm(x, scale, bias, call.attr("axis", -1), call.attr("epsilon", 1e-5))


@converts("Gelu", attributes=("approximate",), opsets=(20, 23))
def gelu(call, x):
    """Gelu: x * Phi(x), exact (erf) or approximated with tanh."""
    return autograd.gelu(x, call.attr("approximate", "none"))
