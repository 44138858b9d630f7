"""The UCI hand-written digits shipped with nnmem (digits.npz), as ready-to-train arrays.

See DIGITS.md in this folder for the origin and licence of the data.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

from .resize import resize_bilinear
from .split import stratified_split

__all__ = ["load_digits", "digits_raw"]

NUM_CLASSES = 10


@functools.lru_cache(maxsize=1)
def _read_npz() -> tuple[np.ndarray, np.ndarray]:
    with resources.files(__package__).joinpath("digits.npz").open("rb") as f:
        with np.load(f) as npz:
            images, labels = npz["images"], npz["labels"]
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def digits_raw() -> tuple[np.ndarray, np.ndarray]:
    """The shipped data as stored:
    (images uint8 (1797, 8, 8) values 0..16, labels uint8 (1797,) 0..9).

    The arrays are cached and read-only; copy them before changing them.
    """
    return _read_npz()


def load_digits(size: int = 28, test_fraction: float = 0.2, seed: int = 0):
    """The 1797 UCI hand-written digits, scaled, resized and split:
    (x_train, y_train, x_test, y_test).

    size:          side of the square output images; 8 gives the original 8x8 images,
                   anything else is a bilinear resize (:func:`resize_bilinear`,
                   pixel-centre convention). The default 28 matches MNIST's size.
    test_fraction: share of the images held out for testing, 0 <= test_fraction < 1, such
                   that both parts get at least one image (else ValueError).
    seed:          seed of the split; the same seed always gives the same split.

    Returns
      x_train float32 (N_train, 1, size, size), values in [0, 1] (stored 0..16 divided by 16);
      y_train int32 (N_train,), digits 0..9;
      x_test  float32 (N_test, 1, size, size);
      y_test  int32 (N_test,).
    The split is stratified (:func:`stratified_split`): each digit's share is the same in
    both parts. With the defaults N_train = 1437 and N_test = 360.
    """
    images, labels = _read_npz()
    train_idx, test_idx = stratified_split(labels, test_fraction, seed)
    if train_idx.size == 0 or test_idx.size == 0:
        raise ValueError(
            f"load_digits: test_fraction={test_fraction} leaves {train_idx.size} training and "
            f"{test_idx.size} test images of {labels.size}; choose one that leaves at least one "
            "image in each part (the default, 0.2, leaves 1437 and 360)"
        )
    x = images.astype(np.float32) / np.float32(16.0)
    if size != 8:
        x = resize_bilinear(x, size)
    x = x[:, None, :, :]
    y = labels.astype(np.int32)
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]
