"""Stand-in for SINGA's cnn/data/cifar10.py, which reads CIFAR-10's batches from /tmp.

load() returns what SINGA's load() returns, (train_x, train_y, val_x, val_y): images float32
(N, 3, 32, 32), pixel bytes divided by 255 then standardised with CIFAR-10's channel means and
deviations, and labels int32 (N,) in 0..9. The images are the UCI hand-written digits shipped
with nnmem (nnmem.data.load_digits), resized from 8x8 to 32x32 and gray (three equal planes);
few, so that train_cnn.py runs an epoch in seconds on a CPU.
"""

import numpy as np

from nnmem.data import load_digits

TRAIN_IMAGES, VALIDATION_IMAGES = 256, 128
MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)[:, None, None]
STD = np.array([0.2023, 0.1994, 0.2010], np.float32)[:, None, None]


def as_cifar(x):
    """Gray images in [0, 1], (N, 1, 32, 32), as standardised RGB images from CIFAR's bytes."""
    rgb = np.repeat(np.round(x * 255), 3, axis=1) / 255
    return ((rgb - MEAN) / STD).astype(np.float32)


def load():
    train_x, train_y, val_x, val_y = load_digits(size=32)
    return (
        as_cifar(train_x[:TRAIN_IMAGES]),
        train_y[:TRAIN_IMAGES],
        as_cifar(val_x[:VALIDATION_IMAGES]),
        val_y[:VALIDATION_IMAGES],
    )
