"""A seeded, stratified train/test split of sample indices."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["stratified_split"]


def stratified_split(
    labels, test_fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Split sample indices into (train_idx, test_idx), keeping each class's share in both parts.

    labels:        1-D array of N class labels (any integer values).
    test_fraction: share of the samples that go to the test part, 0 <= test_fraction < 1.
                   The test part gets ``ceil(test_fraction * N)`` samples in total
                   (N=1797, 0.2 -> 360 test, 1437 train), handed out to the classes
                   in proportion to their sizes (largest remainders get the leftovers,
                   ties going to the smaller label).
    seed:          seeds ``np.random.default_rng``; the same labels, fraction and seed
                   always give the same split.

    Returns two int64 index arrays into ``labels`` that together hold every index
    exactly once; each is in shuffled order (not grouped by class).
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
    test_fraction = float(test_fraction)
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    n = labels.shape[0]
    # round() first so that float noise cannot add a sample:
    # 0.1 * 30 = 3.0000000000000004 must give 3.
    n_test = math.ceil(round(test_fraction * n, 9))
    classes, counts = np.unique(labels, return_counts=True)
    quota = n_test * counts / max(n, 1)
    per_class = np.floor(quota).astype(np.int64)
    leftover = n_test - int(per_class.sum())
    if leftover > 0:
        # Largest fractional remainder first; stable sort keeps the smaller label first on ties.
        order = np.argsort(-(quota - per_class), kind="stable")
        per_class[order[:leftover]] += 1

    rng = np.random.default_rng(seed)
    train_parts, test_parts = [], []
    for cls, k in zip(classes, per_class):
        members = rng.permutation(np.flatnonzero(labels == cls))
        test_parts.append(members[:k])
        train_parts.append(members[k:])
    empty = np.empty(0, dtype=np.int64)
    train_idx = rng.permutation(np.concatenate(train_parts) if train_parts else empty).astype(
        np.int64
    )
    test_idx = rng.permutation(np.concatenate(test_parts) if test_parts else empty).astype(np.int64)
    return train_idx, test_idx
