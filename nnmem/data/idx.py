"""MNIST IDX files: read and write them (raw or gzip-compressed), and load an MNIST-style set.

The IDX format (http://yann.lecun.com/exdb/mnist/):

    bytes 0-1   0x00 0x00                     magic
    byte  2     type code                     0x08 uint8, 0x09 int8, 0x0B int16,
                                              0x0C int32, 0x0D float32, 0x0E float64
    byte  3     ndim                          number of dimensions (>= 1)
    then        ndim x uint32, big-endian     the size of each dimension
    then        prod(dims) values, big-endian, row-major (C order), nothing after them

Files may be gzip-compressed as distributed (``train-images-idx3-ubyte.gz``); the
reader recognises gzip by its magic bytes 1f 8b, whatever the file is called.
"""

from __future__ import annotations

import gzip as _gzip
import math
import os
import zlib

import numpy as np

from ..regular_file import open_regular
from .errors import _format_error, _not_a_file, _not_a_folder, _plural

__all__ = ["read_idx", "write_idx", "load_mnist", "IDX_TYPES"]

#: IDX type code -> big-endian NumPy dtype of the stored values.
IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_TYPE_NAMES = {
    0x08: "uint8",
    0x09: "int8",
    0x0B: "int16",
    0x0C: "int32",
    0x0D: "float32",
    0x0E: "float64",
}
_CODE_OF = {np.dtype(name): code for code, name in _TYPE_NAMES.items()}
_ACCEPTED_TYPES = ", ".join(f"0x{code:02X} ({name})" for code, name in _TYPE_NAMES.items())
_GZIP_MAGIC = b"\x1f\x8b"
_REFETCH = "download the file again (the copy on disk is damaged or incomplete)"
# Deflate writes at least 2 bits for a copy of at most 258 bytes, so a gzip file never expands
# more than about 1032 times: a header announcing more data than that is wrong.
_DEFLATE_MAX_RATIO = 1032
_CHUNK = 2**20
# The most dimensions a NumPy array can have (NPY_MAXDIMS): 64 since NumPy 2.0, 32 before.
_MAX_NDIM = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
# The most bytes an array can span: NumPy refuses a shape whose nonzero sizes times the item
# size exceed this, even when another size is 0 and the array holds nothing.
_MAX_BYTES = np.iinfo(np.intp).max


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (raw or gzip-compressed) into a native-endian, writable NumPy array.

    Returns an array of the shape stored in the header, with dtype uint8, int8,
    int16, int32, float32 or float64 following the type code. MNIST image files
    give uint8 (N, 28, 28), label files uint8 (N,).

    Memory is bounded by what the header announces and by what the file holds: the header
    is read first, a size the file cannot hold is refused before any data is read (for gzip,
    more than deflate's 1032:1 maximum ratio allows), and then at most the announced bytes
    are read, a chunk at a time, into the result (for gzip, into a buffer that grows as the
    data arrives); one chunk more says whether anything trails them.

    Raises :class:`DataFormatError` (naming the file, the problem and a fix) when the
    path is not a regular file (a folder, a FIFO, a device), the file is not IDX (bad
    magic), has an unknown type code, announces a shape no NumPy array can have (more than
    64 dimensions, 32 before NumPy 2.0; or nonzero sizes whose product in bytes exceeds the
    address space, as 0 x 4G x 4G x 4G), holds fewer data bytes than its header announces
    (truncated) or more (trailing bytes), or is a broken gzip stream. A missing file raises
    the usual FileNotFoundError.
    """
    with open_regular(os.fspath(path), lambda problem: _not_a_file(path, problem)) as raw:
        file_size = os.fstat(raw.fileno()).st_size
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        if not compressed:
            return _read_idx_stream(path, raw, file_size, compressed=False)
        try:
            with _gzip.GzipFile(fileobj=raw) as stream:
                return _read_idx_stream(path, stream, file_size, compressed=True)
        except (OSError, EOFError, zlib.error) as exc:
            raise _format_error(
                path,
                f"the file starts like gzip (bytes 1f 8b) but cannot be decompressed: {exc}.",
                _REFETCH + "; `gzip -t FILE` checks a gzip file.",
            ) from None


def _read_idx_stream(path, stream, file_size: int, compressed: bool) -> np.ndarray:
    """The array of the IDX data in `stream`, read from a file of `file_size` bytes: the
    stream itself when raw, its decompressed content when `compressed`."""
    code, shape, header = _read_idx_header(path, stream)
    dtype = IDX_TYPES[code]
    expected = math.prod(shape) * dtype.itemsize
    described = f"shape {shape} of {_TYPE_NAMES[code]}"
    span = math.prod(d for d in shape if d) * dtype.itemsize
    if span > _MAX_BYTES:
        raise _format_error(
            path,
            f"the header announces {described}, whose nonzero sizes times the "
            f"{_plural(dtype.itemsize, 'byte')} of a value make {span} bytes, more than any "
            f"NumPy array can span ({_MAX_BYTES} bytes), even an empty one.",
            _REFETCH
            + "; if you wrote the file yourself, check the dimensions written in its header.",
        )
    if not compressed and header + expected != file_size:  # the size tells, nothing to read
        found = file_size - header
        if found < expected:
            raise _truncated(path, described, header, expected, found)
        raise _trailing(path, described, header, expected, found)
    if compressed and header + expected > file_size * _DEFLATE_MAX_RATIO:
        raise _format_error(
            path,
            f"the header announces {described}, {expected} bytes of data, but this gzip file of "
            f"{_plural(file_size, 'byte')} decompresses to at most "
            f"{file_size * _DEFLATE_MAX_RATIO} bytes "
            f"(deflate's maximum ratio is {_DEFLATE_MAX_RATIO}:1).",
            _REFETCH
            + "; if you wrote the file yourself, check the dimensions written in its header.",
        )
    # A raw file's size was checked against the header: its buffer is allocated whole. A gzip
    # stream's is grown as the data arrives, so a header announcing more than the stream
    # holds (up to deflate's ratio, 96 GiB for a 100 MiB file) costs only what is there.
    data, found = _read_upto(
        stream, expected, initial=min(expected, _CHUNK) if compressed else expected
    )
    if found < expected:
        raise _truncated(path, described, header, expected, found)
    extra = len(stream.read(_CHUNK))  # a chunk says there is more: no need to read it all
    if extra:
        at_least = extra == _CHUNK  # a full chunk: there may be more
        raise _trailing(path, described, header, expected, expected + extra, at_least)
    return data.view(dtype).astype(dtype.newbyteorder("="), copy=False).reshape(shape)


def _read_idx_header(path, stream) -> tuple[int, tuple[int, ...], int]:
    """(type code, shape, header size in bytes) from the start of an IDX stream."""
    start = stream.read(4)
    if len(start) < 4:
        raise _format_error(
            path,
            f"not an IDX file: only {_plural(len(start), 'byte')} (after any gzip decompression), "
            "but the IDX header alone is at least 4 bytes.",
            _REFETCH + ".",
        )
    if start[0] != 0 or start[1] != 0:
        raise _format_error(
            path,
            f"not an IDX file: bad magic, the first bytes are {start.hex(' ')} but an IDX file "
            "starts with 00 00 <type> <ndim>.",
            "pass an MNIST IDX file such as train-images-idx3-ubyte or train-images-idx3-ubyte.gz; "
            "this error is typical of a saved HTML error page "
            "or of another format (PNG, CSV, NumPy).",
        )
    code, ndim = start[2], start[3]
    if code not in IDX_TYPES:
        raise _format_error(
            path,
            f"unknown IDX type code 0x{code:02X} in byte 2 of the header; "
            f"the known codes are {_ACCEPTED_TYPES}.",
            _REFETCH + ", or convert the data to one of the known types.",
        )
    if ndim == 0:
        raise _format_error(
            path,
            "the IDX header says 0 dimensions (byte 3); an IDX file has at least one.",
            _REFETCH + ".",
        )
    if ndim > _MAX_NDIM:
        raise _format_error(
            path,
            f"the IDX header says {ndim} dimensions (byte 3), more than the {_MAX_NDIM} a NumPy "
            f"array can have (NumPy {np.__version__}).",
            _REFETCH
            + "; if you wrote the file yourself, check the number of dimensions in its header.",
        )
    header = 4 + 4 * ndim
    dims = stream.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise _format_error(
            path,
            f"truncated header: {ndim} dimensions need a {header}-byte header, found only "
            f"{_plural(4 + len(dims), 'byte')} in the file.",
            _REFETCH + ".",
        )
    shape = tuple(int(d) for d in np.frombuffer(dims, dtype=">u4"))
    return code, shape, header


def _truncated(path, described: str, header: int, expected: int, found: int):
    return _format_error(
        path,
        f"truncated data: the header announces {described}, which needs {expected} bytes after the "
        f"{header}-byte header, but only {found} are there ({expected - found} missing).",
        _REFETCH + "; an interrupted download is the usual cause.",
    )


def _trailing(path, described: str, header: int, expected: int, found: int, at_least=False):
    more = "at least " if at_least else ""
    return _format_error(
        path,
        f"trailing bytes: the header announces {described}, which needs {expected} bytes after the "
        f"{header}-byte header, but {more}{found} are there ({more}{found - expected} extra).",
        _REFETCH + "; if you wrote the file yourself, check the dimensions written in its header.",
    )


def _read_upto(stream, expected: int, initial: int) -> tuple[np.ndarray, int]:
    """(buffer, bytes read): at most `expected` bytes of `stream`, read a chunk at a time into
    a uint8 buffer of `initial` bytes that doubles (up to `expected`) whenever it is full."""
    data, filled = np.empty(initial, np.uint8), 0
    while filled < expected:
        if filled == data.size:
            grown = np.empty(min(expected, 2 * data.size), np.uint8)
            grown[:filled] = data
            data = grown
        n = stream.readinto(memoryview(data)[filled : min(data.size, filled + _CHUNK)])
        if not n:
            break
        filled += n
    return data, filled


def write_idx(path: str | os.PathLike, array, gzip: bool = False) -> str:
    """Write ``array`` as an IDX file at ``path``; gzip-compress it when ``gzip=True``.

    array: at least 1-D, dtype uint8, int8, int16, int32, float32 or float64
           (other dtypes raise TypeError: convert first, e.g. ``array.astype(np.uint8)``);
           at most 255 dimensions, each < 2**32.
    The compressed form does not depend on the time of writing (gzip mtime 0).
    Returns the path written, as a str.
    """
    array = np.asarray(array)
    code = _CODE_OF.get(array.dtype.newbyteorder("="))
    if code is None:
        raise TypeError(
            f"write_idx: dtype {array.dtype} has no IDX type code; use one of "
            f"{', '.join(_TYPE_NAMES.values())} (e.g. array.astype(np.uint8))"
        )
    if not 1 <= array.ndim <= 255:
        raise ValueError(
            f"write_idx: IDX stores 1 to 255 dimensions, got an array of shape {array.shape}"
        )
    if any(d >= 2**32 for d in array.shape):
        raise ValueError(f"write_idx: every dimension must be < 2**32, got shape {array.shape}")
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = header + np.ascontiguousarray(array, dtype=IDX_TYPES[code]).tobytes()
    if gzip:
        payload = _gzip.compress(payload, mtime=0)
    with open(path, "wb") as f:
        f.write(payload)
    return os.fspath(path)


def _find(directory: str, base: str) -> str | None:
    """The file `base` or `base`.gz in `directory`, a regular file first; else whichever of
    the two exists, which read_idx then says is not a file (a FIFO or a folder of that name
    is not "missing")."""
    candidates = [os.path.join(directory, name) for name in (base, base + ".gz")]
    regular = [path for path in candidates if os.path.isfile(path)]
    there = regular or [path for path in candidates if os.path.exists(path)]
    return there[0] if there else None


def load_mnist(
    directory: str | os.PathLike, kind: str = "train", num_classes: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Load one part of an MNIST-style data set (MNIST, Fashion-MNIST, ...) from its IDX files.

    directory:   folder holding ``{kind}-images-idx3-ubyte`` and ``{kind}-labels-idx1-ubyte``,
                 each either raw or gzip-compressed with a ``.gz`` suffix (the raw name wins
                 when both exist).
    kind:        "train" (60000 images for MNIST) or "t10k" (the 10000 test images).
    num_classes: the data set's number of classes; every label must be in 0..num_classes-1.
                 MNIST and Fashion-MNIST have 10; pass another number for a variant with
                 more (EMNIST balanced: 47).

    Returns (x, y): x float32 (N, 1, H, W) in [0, 1] (stored bytes divided by 255;
    H = W = 28 for MNIST), y int32 (N,); N, H, W >= 1.

    Raises :class:`DataFormatError` when a file is missing (listing the names looked for),
    is not valid IDX (see :func:`read_idx`), has the wrong shape or type for images
    (uint8, 3-D) or labels (uint8, 1-D), holds no image or images of no pixel (height or
    width 0), holds a label outside 0..num_classes-1 (a model would silently get one output
    per value up to the largest), or when image and label counts differ.
    """
    if kind not in ("train", "t10k"):
        raise ValueError(f'load_mnist: kind must be "train" or "t10k", got {kind!r}')
    directory = os.fspath(directory)
    bases = (f"{kind}-images-idx3-ubyte", f"{kind}-labels-idx1-ubyte")
    found = [_find(directory, base) for base in bases]
    missing = [base for base, path in zip(bases, found) if path is None]
    if missing:
        looked = "; ".join(f"{base} or {base}.gz" for base in missing)
        where = _not_a_folder(directory)
        raise _format_error(
            directory,
            f"MNIST {kind} files not found{where}: looked for {looked}.",
            "put the MNIST files (from http://yann.lecun.com/exdb/mnist/ or a mirror) "
            f"in {directory}, "
            "gzip-compressed or not, keeping their original names.",
        )
    images_path, labels_path = found
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise _format_error(
            images_path,
            "expected uint8 images of shape (N, H, W), "
            f"found {images.dtype} of shape {images.shape}.",
            "check that this is an image file (...-images-idx3-ubyte) and not a label file.",
        )
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise _format_error(
            labels_path,
            f"expected uint8 labels of shape (N,), found {labels.dtype} of shape {labels.shape}.",
            "check that this is a label file (...-labels-idx1-ubyte) and not an image file.",
        )
    if images.shape[0] == 0:
        raise _format_error(
            images_path,
            f"the file holds no image (its header says shape {images.shape}).",
            _REFETCH + "; a data set needs at least one image to train or test on.",
        )
    if 0 in images.shape:
        raise _format_error(
            images_path,
            f"the images are empty: the header says shape {images.shape}, images of "
            f"{images.shape[1]} x {images.shape[2]} pixels (height x width), where a model "
            "needs at least one pixel.",
            _REFETCH + "; if you wrote the file yourself, check the height and width in its "
            "header.",
        )
    if images.shape[0] != labels.shape[0]:
        raise _format_error(
            directory,
            f"count mismatch: {os.path.basename(images_path)} holds {images.shape[0]} images but "
            f"{os.path.basename(labels_path)} holds {labels.shape[0]} labels.",
            "use an image file and a label file of the same release and part "
            "(both train or both t10k); "
            "download the one that is wrong again.",
        )
    _check_labels(labels_path, labels, num_classes)
    x = images.astype(np.float32)[:, None, :, :]
    x /= np.float32(255.0)
    return x, labels.astype(np.int32)


def _check_labels(path, labels: np.ndarray, num_classes: int) -> None:
    """Every label is in 0..num_classes-1 (IDX labels are uint8, never negative)."""
    values, counts = np.unique(labels[labels >= num_classes], return_counts=True)
    if values.size:
        listed = ", ".join(
            f"{int(v)} ({_plural(int(c), 'time')})" for v, c in zip(values[:5], counts[:5])
        )
        more = f" and {values.size - 5} other values" if values.size > 5 else ""
        raise _format_error(
            path,
            f"labels outside the {num_classes} classes 0..{num_classes - 1}: {listed}{more} "
            f"({int(counts.sum())} of the {labels.size} labels).",
            _REFETCH + "; if the data set really has more classes, pass their number "
            "(EMNIST balanced: load_mnist(DIR, kind, num_classes=47)).",
        )
