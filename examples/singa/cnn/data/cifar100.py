"""Stand-in for SINGA's cnn/data/cifar100.py, which reads CIFAR-100 from /tmp.

load() returns what SINGA's load() returns, (train_x, train_y, val_x, val_y): images float32
(N, 3, 32, 32), standardised as in cifar10.py, and labels int32 (N,) in 0..99, each class
present in both parts (train_cnn.py counts the classes as the largest label plus one). An
image is two of the UCI hand-written digits shipped with nnmem side by side, each 16 pixels
wide, and its label the two-digit number they make: 100 classes from 10 digits.
"""

import numpy as np

from nnmem.data import load_digits, resize_bilinear

from .cifar10 import as_cifar

TRAIN_IMAGES, VALIDATION_IMAGES = 300, 100


def pairs(x, y, count, rng):
    """`count` images of two digits side by side, labelled 10 * left + right, the labels
    cycling through 0..99 so that every class appears."""
    labels = np.arange(count) % 100
    by_digit = [np.flatnonzero(y == d) for d in range(10)]
    left = [rng.choice(by_digit[label // 10]) for label in labels]
    right = [rng.choice(by_digit[label % 10]) for label in labels]
    images = np.concatenate([x[left], x[right]], axis=3)  # (count, 1, 32, 32)
    return as_cifar(images), labels.astype(np.int32)


def load():
    train_x, train_y, val_x, val_y = load_digits(size=32)
    train_x, val_x = resize_bilinear(train_x, (32, 16)), resize_bilinear(val_x, (32, 16))
    rng = np.random.default_rng(0)
    train_x, train_y = pairs(train_x, train_y, TRAIN_IMAGES, rng)
    val_x, val_y = pairs(val_x, val_y, VALIDATION_IMAGES, rng)
    return train_x, train_y, val_x, val_y
