"""Small array helpers for training loops: one-hot labels, mini-batches,
per-channel normalisation."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .errors import _plural

__all__ = ["one_hot", "iterate_batches", "normalize"]


def one_hot(labels, num_classes: int, dtype=np.int32) -> np.ndarray:
    """One-hot encode integer labels.

    labels:      integer array of any shape S (usually (N,)), values in 0..num_classes-1.
    num_classes: number of classes C (>= 1).
    dtype:       dtype of the result (int32 by default; pass np.float32 for a loss target).

    Returns an array of shape S + (C,) with a 1 at each label's position and 0 elsewhere.
    Raises ValueError naming the first label out of range and where it is.
    """
    labels = np.asarray(labels)
    if not (np.issubdtype(labels.dtype, np.integer) or labels.dtype == np.bool_):
        raise TypeError(f"one_hot: labels must be integers, got dtype {labels.dtype}")
    num_classes = int(num_classes)
    if num_classes < 1:
        raise ValueError(f"one_hot: num_classes must be >= 1, got {num_classes}")
    bad = (labels < 0) | (labels >= num_classes)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        position = where[0] if len(where) == 1 else where
        raise ValueError(
            f"one_hot: label {int(labels[where])} at index {position} is out of range "
            f"0..{num_classes - 1} for num_classes={num_classes} "
            f"({_plural(int(bad.sum()), 'label')} out of range in all)"
        )
    out = np.zeros(labels.shape + (num_classes,), dtype=dtype)
    np.put_along_axis(out, labels.astype(np.intp)[..., None], 1, axis=-1)
    return out


def iterate_batches(
    x,
    y,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    epoch: int = 0,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield mini-batches (xb, yb) that cover every sample once, in one epoch.

    x, y:       arrays with the same first dimension N (e.g. x (N, C, H, W), y (N,)).
    batch_size: samples per batch (>= 1); the last batch is smaller when N is not a
                multiple of it, unless ``drop_last=True`` drops it.
    shuffle:    visit the samples in a random order (else in order 0..N-1).
    seed, epoch: the order is ``np.random.default_rng([seed, epoch]).permutation(N)``,
                so a (seed, epoch) pair always gives the same order, and passing the
                epoch number gives a new order each epoch:
                ``for epoch in range(E): for xb, yb in iterate_batches(x, y, 64, epoch=epoch)``.

    Yields (xb, yb): NumPy arrays of shape (B, ...) with B = batch_size, except possibly
    the last. With ``shuffle=True`` they are fresh copies; with ``shuffle=False`` they
    are views (slices) of x and y, so copy them before changing them.
    Arguments are checked when the function is called, not at the first batch.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError("iterate_batches: x and y must have a first (sample) dimension")
    n = x.shape[0]
    if y.shape[0] != n:
        raise ValueError(f"iterate_batches: x has {n} samples but y has {y.shape[0]}")
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise ValueError(f"iterate_batches: batch_size must be a positive int, got {batch_size!r}")
    order = np.random.default_rng([int(seed), int(epoch)]).permutation(n) if shuffle else None
    return _batches(x, y, int(batch_size), order, drop_last)


def _batches(x, y, batch_size, order, drop_last):
    n = x.shape[0]
    stop = n - n % batch_size if drop_last else n
    for start in range(0, stop, batch_size):
        end = min(start + batch_size, n)
        if order is None:
            yield x[start:end], y[start:end]
        else:
            idx = order[start:end]
            yield x[idx], y[idx]


def normalize(x, mean, std) -> np.ndarray:
    """Per-channel normalisation: (x - mean[c]) / std[c] along axis 1.

    x:    array (N, C, ...) such as images (N, C, H, W).
    mean: a scalar (all channels) or C values.
    std:  a scalar or C values, all > 0.

    Returns a new float32 array of x's shape. Example for CIFAR-10:
    ``normalize(x, mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616))``.
    """
    x = np.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"normalize: x must have shape (N, C, ...), got {x.shape}")
    channels = x.shape[1]
    stats = []
    for name, value in (("mean", mean), ("std", std)):
        v = np.asarray(value, dtype=np.float32).reshape(-1)
        if v.size not in (1, channels):
            raise ValueError(
                f"normalize: {name} needs 1 or {channels} values "
                f"(x has {channels} channels), got {v.size}"
            )
        stats.append(v.reshape((1, -1) + (1,) * (x.ndim - 2)))
    m, s = stats
    if np.any(s <= 0) or not np.all(np.isfinite(s)):
        raise ValueError(f"normalize: std must be finite and > 0, got {np.asarray(std).tolist()}")
    out = x.astype(np.float32)
    out -= m
    out /= s
    return out
