"""The differentiable operators, one family per file, and their functional forms (SINGA names)."""

from nnmem import tensor as _tensor_module
from nnmem.ops import tensor_api
from nnmem.ops.activation import ReLU, Sigmoid, relu, sigmoid
from nnmem.ops.arith import Add, Mul, Reshape, Scale, Sub, reshape
from nnmem.ops.batchnorm import BatchNorm2d, batchnorm_2d
from nnmem.ops.broadcast import Broadcast, div
from nnmem.ops.composite import (
    add_all,
    binary_cross_entropy,
    cossim,
    cross_entropy,
    gemm,
    globalaveragepool,
    identity,
    max,
    mean,
    min,
    negative,
    pow,
    prelu,
    ranking_loss,
    sum,
    where,
)
from nnmem.ops.conv import Conv2d, conv2d
from nnmem.ops.dropout import Dropout, dropout
from nnmem.ops.embedding import Embedding, embedding
from nnmem.ops.host_ops import (
    _and,
    _not,
    _or,
    _xor,
    cast,
    constant_of_shape,
    nonzero,
    onehot,
    shape,
)
from nnmem.ops.linear import AddBias, Matmul, add_bias, matmul
from nnmem.ops.loss import MeanSquareError, SoftMaxCrossEntropy, mse_loss, softmax_cross_entropy
from nnmem.ops.lrn import LRN, lrn
from nnmem.ops.pointwise import (
    Pointwise,
    abs,
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atanh,
    ceil,
    clip,
    cos,
    cosh,
    elu,
    erf,
    exp,
    floor,
    hardsigmoid,
    leakyrelu,
    log,
    reciprocal,
    round,
    rounde,
    selu,
    sign,
    sin,
    sinh,
    softplus,
    softsign,
    sqrt,
    square,
    tan,
    tanh,
)
from nnmem.ops.pooling import Pooling2d, pooling_2d
from nnmem.ops.rearrange import (
    Expand,
    Pad,
    depth_to_space,
    expand,
    gather,
    pad,
    slice,
    space_to_depth,
    split,
    tile,
    upsample,
)
from nnmem.ops.reduce import Sum, reduce_mean, reduce_sum
from nnmem.ops.shape import Cat, Flatten, cat, flatten
from nnmem.ops.softmax import SoftMax, softmax
from nnmem.ops.transform import Slice, Transpose, squeeze, transpose, unsqueeze
from nnmem.tensor import Tensor

# SINGA's autograd names for the arithmetic and comparisons of nnmem/ops/tensor_api.py: tensors
# of one shape, broadcast shapes, or a tensor and a number.
add, sub, mul = tensor_api.add, tensor_api.sub, tensor_api.eltwise_mult
less, greater, equal = tensor_api.lt, tensor_api.gt, tensor_api.eq

__all__ = [
    "ReLU",
    "Sigmoid",
    "relu",
    "sigmoid",
    "Add",
    "Mul",
    "Reshape",
    "Scale",
    "Sub",
    "reshape",
    "BatchNorm2d",
    "batchnorm_2d",
    "Broadcast",
    "div",
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
    "Conv2d",
    "conv2d",
    "Dropout",
    "dropout",
    "Embedding",
    "embedding",
    "_and",
    "_not",
    "_or",
    "_xor",
    "cast",
    "constant_of_shape",
    "nonzero",
    "onehot",
    "shape",
    "AddBias",
    "Matmul",
    "add_bias",
    "matmul",
    "MeanSquareError",
    "SoftMaxCrossEntropy",
    "mse_loss",
    "softmax_cross_entropy",
    "LRN",
    "lrn",
    "Pointwise",
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "ceil",
    "clip",
    "cos",
    "cosh",
    "elu",
    "erf",
    "exp",
    "floor",
    "hardsigmoid",
    "leakyrelu",
    "log",
    "reciprocal",
    "round",
    "rounde",
    "selu",
    "sign",
    "sin",
    "sinh",
    "softplus",
    "softsign",
    "sqrt",
    "square",
    "tan",
    "tanh",
    "Pooling2d",
    "pooling_2d",
    "Expand",
    "Pad",
    "depth_to_space",
    "expand",
    "gather",
    "pad",
    "slice",
    "space_to_depth",
    "split",
    "tile",
    "upsample",
    "Sum",
    "reduce_mean",
    "reduce_sum",
    "Cat",
    "Flatten",
    "cat",
    "flatten",
    "SoftMax",
    "softmax",
    "Slice",
    "Transpose",
    "squeeze",
    "transpose",
    "unsqueeze",
    "add",
    "sub",
    "mul",
    "less",
    "greater",
    "equal",
]

# A Tensor's arithmetic is differentiable (t + u is add(t, u)), and nnmem.tensor has SINGA's
# functions (tensor.sum, tensor.mult, ...). nnmem.tensor sits below the operators and cannot
# import them, so they are installed here, once, when nnmem is imported (nnmem/__init__
# imports autograd, which imports this package).
Tensor.reshape = reshape
for _name, _method in tensor_api.TENSOR_METHODS.items():
    setattr(Tensor, _name, _method)
for _name in tensor_api.FUNCTIONS:
    setattr(_tensor_module, _name, getattr(tensor_api, _name))
