"""Stand-in for SINGA's cnn/data/mnist.py, which reads the MNIST files from /tmp.

load() returns what SINGA's load() returns, (train_x, train_y, val_x, val_y): images float32
(N, 1, 28, 28) in [0, 1] (MNIST's bytes divided by 255) and labels int32 (N,) in 0..9. The
images are the UCI hand-written digits shipped with nnmem (nnmem.data.load_digits), resized
from 8x8 to 28x28 and rounded to bytes as MNIST stores them; few, so that train_cnn.py runs
an epoch in seconds on a CPU.
"""

import numpy as np

from nnmem.data import load_digits

TRAIN_IMAGES, VALIDATION_IMAGES = 256, 128


def as_mnist_bytes(x):
    """Images in [0, 1] as the uint8 values 0..255 an MNIST file holds."""
    return np.round(x * 255).astype(np.uint8)


def load():
    train_x, train_y, val_x, val_y = load_digits(size=28)
    train_x = as_mnist_bytes(train_x[:TRAIN_IMAGES]).astype(np.float32) / 255
    val_x = as_mnist_bytes(val_x[:VALIDATION_IMAGES]).astype(np.float32) / 255
    return train_x, train_y[:TRAIN_IMAGES], val_x, val_y[:VALIDATION_IMAGES]
