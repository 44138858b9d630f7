"""Data sets shipped with nnmem and loaders for MNIST IDX and CIFAR-10 binary files."""

from __future__ import annotations

from .batches import iterate_batches, normalize, one_hot
from .cifar import CIFAR10_CLASSES, load_cifar10, read_cifar10_batch, write_cifar10_batch
from .digits import digits_raw, load_digits
from .errors import DataFormatError
from .idx import load_mnist, read_idx, write_idx
from .resize import resize_bilinear
from .shard import shard
from .split import stratified_split

__all__ = [
    "DataFormatError",
    "load",
    "load_digits",
    "digits_raw",
    "resize_bilinear",
    "stratified_split",
    "shard",
    "read_idx",
    "write_idx",
    "load_mnist",
    "read_cifar10_batch",
    "write_cifar10_batch",
    "load_cifar10",
    "CIFAR10_CLASSES",
    "one_hot",
    "iterate_batches",
    "normalize",
]

_ACCEPTED = (
    '"digits" (the shipped UCI digits, 28x28), '
    '"mnist:DIR" (IDX files train-* and t10k-* in DIR), '
    '"cifar10:DIR" (a cifar-10-batches-bin folder)'
)


def load(name_or_spec: str):
    """Load a data set named on the command line: (x_train, y_train, x_test, y_test).

    Accepted forms:
      "digits"       -> :func:`load_digits` with its defaults: x float32 (N, 1, 28, 28)
                        in [0, 1], 1437 train and 360 test images;
      "mnist:DIR"    -> :func:`load_mnist` of DIR, kind "train" then "t10k":
                        x float32 (N, 1, 28, 28) in [0, 1];
      "cifar10:DIR"  -> :func:`load_cifar10` of DIR: x float32 (N, 3, 32, 32) in [0, 1].
    Labels are int32 (N,) in 0..9: each of these sets has 10 classes, and a label file
    holding another value (255, say) raises DataFormatError rather than giving a model one
    output per value up to it. Every part holds at least one image. The name before ":" is
    case-insensitive. Anything else raises ValueError listing these forms; missing or
    malformed files raise DataFormatError.
    """
    if not isinstance(name_or_spec, str):
        raise ValueError(
            f"data set spec must be a string, got {type(name_or_spec).__name__}; "
            f"accepted: {_ACCEPTED}"
        )
    spec = name_or_spec.strip()
    name, sep, directory = spec.partition(":")
    name = name.strip().lower()
    if name == "digits" and not sep:
        return load_digits()
    if name in ("mnist", "cifar10") and sep:
        if not directory:
            raise ValueError(
                f"data set spec {name_or_spec!r} names no directory after ':'; "
                f"accepted: {_ACCEPTED}"
            )
        if name == "mnist":
            x_train, y_train = load_mnist(directory, "train")
            x_test, y_test = load_mnist(directory, "t10k")
            return x_train, y_train, x_test, y_test
        return load_cifar10(directory)
    raise ValueError(f"unknown data set spec {name_or_spec!r}; accepted: {_ACCEPTED}")
