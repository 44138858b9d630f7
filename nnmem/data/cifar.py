"""CIFAR-10 binary batches: read and write them, and load the whole set.

The binary version (``cifar-10-binary.tar.gz``, folder ``cifar-10-batches-bin``) stores
records of 3073 bytes and nothing else (no header):

    byte 0          the label, 0..9
    bytes 1..1024   the red plane, 32 rows of 32 pixels, row-major
    bytes 1025..    the green plane, then the blue plane (1024 bytes each)

Files: ``data_batch_1.bin`` .. ``data_batch_5.bin`` (10000 records each) and
``test_batch.bin`` (10000 records).
"""

from __future__ import annotations

import os

import numpy as np

from ..regular_file import open_regular
from .errors import _format_error, _not_a_file, _not_a_folder, _plural

__all__ = ["read_cifar10_batch", "write_cifar10_batch", "load_cifar10", "CIFAR10_CLASSES"]

#: Class names in label order.
CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)

_IMAGE_SHAPE = (3, 32, 32)
_RECORD = 1 + 3 * 32 * 32  # 3073 bytes
_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
_TEST_FILE = "test_batch.bin"
_SOURCE = (
    "the binary version from https://www.cs.toronto.edu/~kriz/cifar.html (cifar-10-binary.tar.gz)"
)


def read_cifar10_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 binary batch file.

    Returns (x, y): x uint8 (N, 3, 32, 32), channels R, G, B; y int32 (N,) in 0..9.

    Raises :class:`DataFormatError` when the path is not a regular file (a folder, a FIFO,
    a device), the file is empty, its size is not a multiple of 3073 bytes (one record), or a
    label is above 9. A missing file raises the usual
    FileNotFoundError.
    """
    with open_regular(os.fspath(path), lambda problem: _not_a_file(path, problem)) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0 or size % _RECORD:  # checked before reading: a wrong file may be huge
            raise _not_a_batch(path, size)
        data = f.read(size)
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, _RECORD)
    labels = records[:, 0]
    bad = np.flatnonzero(labels > 9)
    if bad.size:
        raise _format_error(
            path,
            f"label {int(labels[bad[0]])} in record {int(bad[0])} is out of range 0..9 "
            f"({_plural(bad.size, 'record')} with such labels); this is not a CIFAR-10 batch.",
            f"use {_SOURCE}; CIFAR-100 binary files have a different layout.",
        )
    x = records[:, 1:].reshape((-1,) + _IMAGE_SHAPE).copy()
    return x, labels.astype(np.int32)


def _not_a_batch(path, size: int):
    """The DataFormatError for a file that is not a whole number of records."""
    whole, rest = divmod(size, _RECORD)
    problem = (
        "the file is empty"
        if size == 0
        else f"the size, {size} bytes, is not a multiple of the {_RECORD}-byte CIFAR-10 record "
        f"({whole} whole records and {rest} bytes left over)"
    )
    return _format_error(
        path,
        f"not a CIFAR-10 binary batch: {problem}.",
        f"use {_SOURCE}, not the Python-pickle or MATLAB versions, "
        "and download it again if the file was cut short; "
        "CIFAR-100 binary files (3074-byte records) are a different format.",
    )


def write_cifar10_batch(path: str | os.PathLike, x, y) -> str:
    """Write images and labels as a CIFAR-10 binary batch file
    (the inverse of :func:`read_cifar10_batch`).

    x: uint8 (N, 3, 32, 32), channels R, G, B.
    y: integer labels (N,) in 0..9.
    Returns the path written, as a str.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != _IMAGE_SHAPE:
        raise ValueError(
            f"write_cifar10_batch: x must be uint8 (N, 3, 32, 32), got {x.dtype} {x.shape}"
        )
    if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(
            f"write_cifar10_batch: y must be integer labels of shape ({x.shape[0]},), "
            f"got {y.dtype} {y.shape}"
        )
    if y.size and (y.min() < 0 or y.max() > 9):
        bad = int(np.flatnonzero((y < 0) | (y > 9))[0])
        raise ValueError(
            f"write_cifar10_batch: label {int(y[bad])} at index {bad} is out of range 0..9"
        )
    records = np.empty((x.shape[0], _RECORD), dtype=np.uint8)
    records[:, 0] = y
    records[:, 1:] = x.reshape(x.shape[0], -1)
    with open(path, "wb") as f:
        f.write(records.tobytes())
    return os.fspath(path)


def load_cifar10(
    directory: str | os.PathLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Load CIFAR-10 from a ``cifar-10-batches-bin`` folder: (x_train, y_train, x_test, y_test).

    Reads those of ``data_batch_1.bin`` .. ``data_batch_5.bin`` that are present (at least
    one must be; in order) as the training set, and ``test_batch.bin`` as the test set.

    Returns x_train float32 (N_train, 3, 32, 32) in [0, 1] (bytes divided by 255),
    y_train int32 (N_train,), x_test float32 (N_test, 3, 32, 32), y_test int32 (N_test,).
    With all files, N_train = 50000 and N_test = 10000.

    Raises :class:`DataFormatError` when no training batch or no test batch is found
    (naming the files looked for) or a file is malformed (see :func:`read_cifar10_batch`).
    """
    directory = os.fspath(directory)
    train_paths = [
        os.path.join(directory, n)
        for n in _TRAIN_FILES
        if os.path.exists(os.path.join(directory, n))  # not a file: read_cifar10_batch says so
    ]
    test_path = os.path.join(directory, _TEST_FILE)
    missing = []
    if not train_paths:
        missing.append(f"any of {', '.join(_TRAIN_FILES)}")
    if not os.path.exists(test_path):
        missing.append(_TEST_FILE)
    if missing:
        where = _not_a_folder(directory)
        raise _format_error(
            directory,
            f"CIFAR-10 files not found{where}: looked for {' and '.join(missing)}.",
            f"download {_SOURCE}, unpack it and pass the cifar-10-batches-bin folder.",
        )
    train = [read_cifar10_batch(p) for p in train_paths]
    x_test, y_test = read_cifar10_batch(test_path)
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train])
    return _to_unit_float(x_train), y_train, _to_unit_float(x_test), y_test


def _to_unit_float(x: np.ndarray) -> np.ndarray:
    """uint8 -> float32 in [0, 1], dividing in place (one float32 copy, not two)."""
    out = x.astype(np.float32)
    out /= np.float32(255.0)
    return out
