"""SINGA's ``layer`` module: stateful building blocks, lazily initialised from their first input.

A layer creates its parameters the first time it is called, from the input's shape, dtype and
device (so ``Linear(500)`` needs no input size). Sub-layers and tensors assigned as attributes
are registered in assignment order, and named with dots: ``conv1.W``, ``bn1.running_mean``.

The classes live in nnmem/layers/, one file per kind: base.py (Layer), basic.py (dense,
normalisation, activations, shapes, losses), conv.py (convolution, pooling), recurrent.py
(RNN, LSTM). This module is the name SINGA's programs import.
"""

from nnmem.layers.base import Layer
from nnmem.layers.basic import (
    LRN,
    Add,
    BatchNorm2d,
    BinaryCrossEntropy,
    Cat,
    CrossEntropy,
    Dropout,
    Embedding,
    Flatten,
    Gemm,
    Linear,
    MeanSquareError,
    ReLU,
    Reshape,
    Sigmoid,
    SoftMax,
    SoftMaxCrossEntropy,
)
from nnmem.layers.conv import (
    AvgPool1d,
    AvgPool2d,
    Conv2d,
    MaxPool1d,
    MaxPool2d,
    Pooling2d,
    SeparableConv2d,
)
from nnmem.layers.recurrent import LSTM, RNN

__all__ = [
    "Layer",
    "Linear",
    "Gemm",
    "Embedding",
    "BatchNorm2d",
    "LRN",
    "Dropout",
    "ReLU",
    "Sigmoid",
    "Flatten",
    "Add",
    "Cat",
    "Reshape",
    "SoftMax",
    "SoftMaxCrossEntropy",
    "MeanSquareError",
    "CrossEntropy",
    "BinaryCrossEntropy",
    "Conv2d",
    "SeparableConv2d",
    "Pooling2d",
    "MaxPool2d",
    "AvgPool2d",
    "MaxPool1d",
    "AvgPool1d",
    "RNN",
    "LSTM",
]
