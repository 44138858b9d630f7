"""The differentiable operators, one family per file, and their functional forms (SINGA names)."""

from nnmem.ops.activation import ReLU, Sigmoid, relu, sigmoid
from nnmem.ops.arith import Add, Mul, Reshape, Sub, add, mul, reshape, sub
from nnmem.ops.batchnorm import BatchNorm2d, batchnorm_2d
from nnmem.ops.conv import Conv2d, conv2d
from nnmem.ops.dropout import Dropout, dropout
from nnmem.ops.linear import AddBias, Matmul, add_bias, matmul
from nnmem.ops.loss import MeanSquareError, SoftMaxCrossEntropy, mse_loss, softmax_cross_entropy
from nnmem.ops.lrn import LRN, lrn
from nnmem.ops.pooling import Pooling2d, pooling_2d
from nnmem.ops.shape import Cat, Flatten, cat, flatten
from nnmem.tensor import Tensor

__all__ = [
    "Add",
    "Sub",
    "Mul",
    "Reshape",
    "add",
    "sub",
    "mul",
    "reshape",
    "ReLU",
    "Sigmoid",
    "relu",
    "sigmoid",
    "Matmul",
    "AddBias",
    "matmul",
    "add_bias",
    "Conv2d",
    "conv2d",
    "Pooling2d",
    "pooling_2d",
    "BatchNorm2d",
    "batchnorm_2d",
    "LRN",
    "lrn",
    "Cat",
    "Flatten",
    "cat",
    "flatten",
    "Dropout",
    "dropout",
    "SoftMaxCrossEntropy",
    "MeanSquareError",
    "softmax_cross_entropy",
    "mse_loss",
]

# A Tensor's arithmetic is differentiable: t + u is add(t, u). nnmem.tensor sits below the
# operators and cannot import them, so they give Tensor its operator methods here, once, when
# nnmem is imported (nnmem/__init__ imports autograd, which imports this package).
Tensor.__add__ = add
Tensor.__sub__ = sub
Tensor.__mul__ = Tensor.__rmul__ = mul
Tensor.reshape = reshape
