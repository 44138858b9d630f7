"""Tests of nnmem.data: the shipped digits, IDX and CIFAR-10 readers/writers, batching helpers.

Every IDX or CIFAR file used here is written by the test itself into tmp_path;
nothing is downloaded.
"""

from __future__ import annotations

import gzip
import os
import re
import tracemalloc

import numpy as np
import pytest

import nnmem.data as data
from nnmem.data import (
    DataFormatError,
    digits_raw,
    iterate_batches,
    load,
    load_cifar10,
    load_digits,
    load_mnist,
    normalize,
    one_hot,
    read_cifar10_batch,
    read_idx,
    resize_bilinear,
    stratified_split,
    write_cifar10_batch,
    write_idx,
)

# ----------------------------------------------------------------------------- digits


def test_shipped_file_is_small_and_well_formed():
    path = os.path.join(os.path.dirname(data.__file__), "digits.npz")
    assert os.path.getsize(path) < 100_000
    images, labels = digits_raw()
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8
    assert labels.shape == (1797,) and labels.dtype == np.uint8
    assert images.min() == 0 and images.max() == 16
    assert set(np.unique(labels)) == set(range(10))


def test_load_digits_shapes_dtypes_range_and_split_sizes():
    x_train, y_train, x_test, y_test = load_digits()
    assert x_train.shape == (1437, 1, 28, 28) and x_test.shape == (360, 1, 28, 28)
    assert x_train.dtype == x_test.dtype == np.float32
    assert y_train.shape == (1437,) and y_test.shape == (360,)
    assert y_train.dtype == y_test.dtype == np.int32
    for x in (x_train, x_test):
        assert x.min() >= 0.0 and x.max() <= 1.0
    assert x_train.max() == 1.0  # a 16 pixel maps to exactly 1
    assert set(np.unique(y_train)) == set(range(10))
    assert set(np.unique(y_test)) == set(range(10))


def test_load_digits_is_deterministic_and_seed_changes_the_split():
    a = load_digits(size=8, seed=3)
    b = load_digits(size=8, seed=3)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    c = load_digits(size=8, seed=4)
    assert not np.array_equal(a[1], c[1])


def test_size_8_returns_original_images_over_16():
    images, labels = digits_raw()
    train_idx, test_idx = stratified_split(labels, 0.2, 0)
    x_train, y_train, x_test, y_test = load_digits(size=8)
    assert x_train.shape == (1437, 1, 8, 8)
    np.testing.assert_array_equal(x_train[:, 0], images[train_idx].astype(np.float32) / 16)
    np.testing.assert_array_equal(x_test[:, 0], images[test_idx].astype(np.float32) / 16)
    np.testing.assert_array_equal(y_train, labels[train_idx])
    np.testing.assert_array_equal(y_test, labels[test_idx])


def test_resized_digits_are_the_resize_of_the_originals():
    images, labels = digits_raw()
    train_idx, _ = stratified_split(labels, 0.2, 0)
    x_train, _, _, _ = load_digits(size=16)
    expected = resize_bilinear(images[train_idx[:10]].astype(np.float32) / 16, 16)
    np.testing.assert_allclose(x_train[:10, 0], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "fraction, parts", [(0.0, "1797 training and 0 test"), (0.9999, "0 training and 1797 test")]
)
def test_load_digits_refuses_a_split_that_leaves_a_part_empty(fraction, parts):
    with pytest.raises(ValueError, match=f"test_fraction={fraction} leaves {parts} images"):
        load_digits(test_fraction=fraction)


def test_stratified_split_partitions_and_keeps_class_shares():
    labels = np.repeat(np.arange(3), [50, 30, 20])
    train_idx, test_idx = stratified_split(labels, 0.1, seed=1)
    assert len(test_idx) == 10 and len(train_idx) == 90  # ceil(0.1 * 100) despite float noise
    np.testing.assert_array_equal(np.sort(np.concatenate([train_idx, test_idx])), np.arange(100))
    np.testing.assert_array_equal(np.bincount(labels[test_idx]), [5, 3, 2])
    with pytest.raises(ValueError, match="test_fraction"):
        stratified_split(labels, 1.0)


def test_resize_constant_image_stays_constant():
    img = np.full((2, 8, 8), 0.3, dtype=np.float32)
    for size in (3, 8, 28, (5, 17)):
        out = resize_bilinear(img, size)
        expected_shape = (2,) + ((size, size) if isinstance(size, int) else size)
        assert out.shape == expected_shape and out.dtype == np.float32
        assert np.all(out == np.float32(0.3))


def test_resize_uses_pixel_centres():
    # 1x2 -> 1x4: source positions (o + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25, clamped to [0, 1].
    out = resize_bilinear(np.array([[0.0, 1.0]]), (1, 4))
    np.testing.assert_allclose(out, [[0.0, 0.25, 0.75, 1.0]])
    # Same size is the identity; 2x2 -> 1x1 is the mean of the four pixels.
    img = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(resize_bilinear(img, (3, 4)), img)
    np.testing.assert_allclose(resize_bilinear(np.array([[0.0, 1.0], [2.0, 3.0]]), 1), [[1.5]])
    with pytest.raises(ValueError, match="size"):
        resize_bilinear(img, 0)


# ----------------------------------------------------------------------------- IDX

IDX_DTYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.int16,
    0x0C: np.int32,
    0x0D: np.float32,
    0x0E: np.float64,
}


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gz"])
@pytest.mark.parametrize("code", sorted(IDX_DTYPES), ids=lambda c: f"0x{c:02X}")
def test_idx_round_trip(tmp_path, code, compress):
    dtype = IDX_DTYPES[code]
    rng = np.random.default_rng(code)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        array = rng.integers(info.min, info.max, size=(3, 4, 5), endpoint=True).astype(dtype)
    else:
        array = rng.standard_normal((3, 4, 5)).astype(dtype)
    path = tmp_path / "a.idx"
    write_idx(path, array, gzip=compress)
    raw = path.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == compress
    header = gzip.decompress(raw)[:16] if compress else raw[:16]
    assert header[:4] == bytes([0, 0, code, 3])
    assert header[4:16] == b"\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05"  # big-endian dims
    back = read_idx(path)
    assert back.dtype == dtype and back.dtype.isnative and back.shape == (3, 4, 5)
    assert back.flags.writeable
    np.testing.assert_array_equal(back, array)


def test_idx_values_are_big_endian(tmp_path):
    path = tmp_path / "b.idx"
    write_idx(path, np.array([1, 258], dtype=np.int16))
    assert path.read_bytes()[8:] == b"\x00\x01\x01\x02"


def test_read_idx_detects_gzip_by_magic_not_name(tmp_path):
    array = np.arange(6, dtype=np.uint8).reshape(2, 3)
    write_idx(tmp_path / "no_suffix", array, gzip=True)
    write_idx(tmp_path / "fake.gz", array, gzip=False)
    np.testing.assert_array_equal(read_idx(tmp_path / "no_suffix"), array)
    np.testing.assert_array_equal(read_idx(tmp_path / "fake.gz"), array)


def _idx_bytes(array: np.ndarray) -> bytes:
    return (
        bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, ">u4").tobytes() + array.tobytes()
    )


def test_read_idx_bad_magic(tmp_path):
    path = tmp_path / "page.html"
    path.write_bytes(b"<html>not found</html>")
    with pytest.raises(DataFormatError, match=r"page\.html.*not an IDX file.*bad magic") as info:
        read_idx(path)
    assert "How to fix it" in str(info.value)


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gz"])
def test_read_idx_truncated(tmp_path, compress):
    good = _idx_bytes(np.zeros((4, 5), np.uint8))
    payload = good[:-7]
    path = tmp_path / "cut"
    path.write_bytes(gzip.compress(payload) if compress else payload)
    with pytest.raises(DataFormatError, match=r"cut: truncated data.*needs 20 bytes.*only 13"):
        read_idx(path)


def test_read_idx_truncated_header(tmp_path):
    path = tmp_path / "short"
    path.write_bytes(bytes([0, 0, 8, 3, 0, 0, 0, 1]))
    with pytest.raises(DataFormatError, match="truncated header"):
        read_idx(path)


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gz"])
def test_read_idx_trailing_bytes(tmp_path, compress):
    payload = _idx_bytes(np.zeros((4, 5), np.uint8)) + b"\x00\x00\x00"
    path = tmp_path / "long"
    path.write_bytes(gzip.compress(payload) if compress else payload)
    with pytest.raises(
        DataFormatError, match=r"long: trailing bytes.*needs 20 bytes.*but 23.*3 extra"
    ):
        read_idx(path)


def test_read_idx_unknown_type(tmp_path):
    path = tmp_path / "weird"
    path.write_bytes(bytes([0, 0, 0x0A, 1, 0, 0, 0, 1, 7]))
    with pytest.raises(DataFormatError, match=r"weird: unknown IDX type code 0x0A"):
        read_idx(path)


def test_read_idx_broken_gzip(tmp_path):
    path = tmp_path / "broken.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.zeros(100, np.uint8)))[:20])
    with pytest.raises(DataFormatError, match="cannot be decompressed"):
        read_idx(path)


def _peak_bytes_while_refused(read, path):
    """The peak of Python and NumPy allocations while read(path) raises DataFormatError;
    its message."""
    tracemalloc.start()
    try:
        with pytest.raises(DataFormatError) as info:
            read(path)
        return tracemalloc.get_traced_memory()[1], str(info.value)
    finally:
        tracemalloc.stop()


def test_read_idx_refuses_a_gzip_bomb_before_decompressing_it(tmp_path):
    # 64 MiB of zeros (about 64 KiB compressed) after a header announcing 13 GB of images
    path = tmp_path / "bomb-idx3-ubyte.gz"
    with gzip.open(path, "wb") as f:
        f.write(bytes([0, 0, 0x08, 3]) + np.array([2**24, 28, 28], ">u4").tobytes())
        for _ in range(4):
            f.write(bytes(16 * 2**20))
    compressed = path.stat().st_size
    peak, message = _peak_bytes_while_refused(read_idx, path)
    assert f"announces shape (16777216, 28, 28) of uint8, {2**24 * 784} bytes of data" in message
    assert (
        f"this gzip file of {compressed} bytes decompresses to at most {compressed * 1032} bytes"
        in message
    )
    assert peak < 2**20  # the 64 MiB were never decompressed


def test_read_idx_grows_a_gzip_buffer_as_the_data_comes(tmp_path):
    """A header within deflate's ratio but far beyond the data (1 GiB announced, 2 MiB there)
    costs what is there, not what is announced: the buffer doubles as the data arrives."""
    path = tmp_path / "short-idx1-ubyte.gz"
    rng = np.random.default_rng(0)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(bytes([0, 0, 0x08, 1]) + np.array([2**30], ">u4").tobytes())
        f.write(rng.integers(0, 256, 2 * 2**20, dtype=np.uint8).tobytes())  # incompressible
    assert path.stat().st_size * 1032 > 2**30  # so the ratio check lets it through
    peak, message = _peak_bytes_while_refused(read_idx, path)
    assert f"needs {2**30} bytes after the 8-byte header, but only {2 * 2**20} are there" in message
    assert peak < 16 * 2**20, peak


def test_read_idx_stops_at_the_first_chunk_of_trailing_gzip_data(tmp_path):
    """64 MiB of zeros after a complete array: one chunk says there is more, the rest is not
    decompressed to count it."""
    path = tmp_path / "long.gz"
    with gzip.open(path, "wb") as f:
        f.write(_idx_bytes(np.zeros(3, np.uint8)))
        for _ in range(4):
            f.write(bytes(16 * 2**20))
    with pytest.raises(DataFormatError, match=r"needs 3 bytes.*but at least 1048579 are there"):
        read_idx(path)


@pytest.mark.skipif(os.name != "posix", reason="FIFOs are POSIX")
@pytest.mark.parametrize("reader", ["idx", "cifar", "mnist"])
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_path_that_is_not_a_regular_file_is_refused_unopened(tmp_path, reader, kind):
    """A FIFO would block the reader until someone writes to it; load_mnist passes it on to
    read_idx, which says what it is, rather than calling the file missing."""
    name = "train-images-idx3-ubyte" if reader == "mnist" else "thing"
    path = tmp_path / name
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    if reader == "mnist":  # its partner file is there
        write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(1, np.uint8))
    read = {
        "idx": read_idx,
        "cifar": read_cifar10_batch,
        "mnist": lambda _: load_mnist(tmp_path),
    }[reader]
    what = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
    with pytest.raises(DataFormatError, match=re.escape(f"{name}: cannot read it as a data")) as e:
        read(path)
    assert f"it is {what}, not a regular file" in str(e.value)


def _sparse_file(path, head: bytes, size: int):
    """A file of `size` bytes starting with `head`, the rest a hole
    (no disk blocks where supported)."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def test_wrong_sized_huge_files_are_refused_from_their_size_unread(tmp_path):
    big = 256 * 2**20
    idx = _sparse_file(
        tmp_path / "labels", bytes([0, 0, 0x08, 1]) + np.array([10], ">u4").tobytes(), big
    )
    peak, message = _peak_bytes_while_refused(read_idx, idx)
    assert (
        "trailing bytes: the header announces shape (10,) of uint8, which needs 10 bytes" in message
    )
    assert f"({big - 8 - 10} extra)" in message and peak < 2**20
    cifar = _sparse_file(tmp_path / "data_batch_1.bin", b"", big + 5)
    peak, message = _peak_bytes_while_refused(read_cifar10_batch, cifar)
    assert (
        f"the size, {big + 5} bytes, is not a multiple of the 3073-byte" in message and peak < 2**20
    )


def _idx_header(code: int, dims) -> bytes:
    """An IDX header announcing `dims` (any number of them, each < 2**32) of type `code`."""
    return bytes([0, 0, code, len(dims)]) + np.asarray(dims, ">u4").tobytes()


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gz"])
@pytest.mark.parametrize("ndim", [65, 255])
def test_read_idx_refuses_more_dimensions_than_numpy_allows(tmp_path, ndim, compress):
    payload = _idx_header(0x08, [1] * ndim) + b"\x07"  # one value, honest otherwise
    path = tmp_path / "many-dims"
    path.write_bytes(gzip.compress(payload) if compress else payload)
    expected = (
        rf"many-dims: the IDX header says {ndim} dimensions \(byte 3\), more than the (32|64)"
    )
    with pytest.raises(DataFormatError, match=expected) as info:  # not numpy's ValueError
        read_idx(path)
    assert "How to fix it" in str(info.value)


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gz"])
@pytest.mark.parametrize(
    "code, dims",
    [(0x08, [0, 2**32 - 1, 2**32 - 1, 2**32 - 1]), (0x0E, [2**30, 0, 2**30])],
    ids=["0x4Gx4Gx4G-uint8", "1Gx0x1G-float64"],
)
def test_read_idx_refuses_an_empty_shape_no_array_can_have(tmp_path, code, dims, compress):
    # No data is announced (a size is 0), but NumPy refuses the shape: "array is too big".
    path = tmp_path / "empty-but-huge"
    payload = _idx_header(code, dims)
    path.write_bytes(gzip.compress(payload) if compress else payload)
    with pytest.raises(
        DataFormatError, match=r"empty-but-huge: the header announces shape .*more than any NumPy"
    ):
        read_idx(path)


@pytest.mark.skipif(np.iinfo(np.intp).max < 2**63 - 1, reason="a 64-bit address space")
def test_read_idx_still_reads_an_empty_shape_numpy_allows(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(_idx_header(0x08, [0, 2**32 - 1, 2**31]))  # 2**63 - 2**31 bytes: allowed
    assert read_idx(path).shape == (0, 2**32 - 1, 2**31)
    path.write_bytes(_idx_header(0x08, [0] * 32))
    assert read_idx(path).shape == (0,) * 32


def test_write_idx_rejects_unsupported_dtype(tmp_path):
    with pytest.raises(TypeError, match="no IDX type code"):
        write_idx(tmp_path / "x", np.zeros(3, np.int64))


def _fake_mnist(directory, kind, n=5, compress=False, n_labels=None):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    images[0, 0, 0], images[0, 0, 1] = 0, 255
    labels = rng.integers(0, 10, size=n if n_labels is None else n_labels, dtype=np.uint8)
    suffix = ".gz" if compress else ""
    write_idx(directory / f"{kind}-images-idx3-ubyte{suffix}", images, gzip=compress)
    write_idx(directory / f"{kind}-labels-idx1-ubyte{suffix}", labels, gzip=compress)
    return images, labels


def test_load_mnist_takes_the_gz_file_beside_a_folder_of_the_raw_name(tmp_path):
    """A regular file wins over a folder named like the other spelling."""
    images, labels = _fake_mnist(tmp_path, "train", compress=True)
    (tmp_path / "train-images-idx3-ubyte").mkdir()
    x, y = load_mnist(tmp_path, "train")
    np.testing.assert_array_equal(y, labels)
    assert x.shape == (5, 1, 28, 28)


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gz"])
def test_load_mnist(tmp_path, compress):
    images, labels = _fake_mnist(tmp_path, "train", compress=compress)
    x, y = load_mnist(tmp_path, "train")
    assert x.shape == (5, 1, 28, 28) and x.dtype == np.float32
    assert y.shape == (5,) and y.dtype == np.int32
    assert x.min() == 0.0 and x.max() == 1.0
    np.testing.assert_allclose(x[:, 0] * 255, images, atol=1e-4)
    np.testing.assert_array_equal(y, labels)


def test_load_mnist_missing_files(tmp_path):
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", np.zeros((2, 28, 28), np.uint8), gzip=True)
    with pytest.raises(
        DataFormatError, match=r"t10k-labels-idx1-ubyte or t10k-labels-idx1-ubyte\.gz"
    ) as info:
        load_mnist(tmp_path, "t10k")
    assert (
        "t10k-images" not in str(info.value).split("How to fix it")[0]
    )  # the image file was found
    with pytest.raises(DataFormatError, match=r"not found \(the directory does not exist\)"):
        load_mnist(tmp_path / "nowhere", "train")
    with pytest.raises(DataFormatError, match=r"not found \(it is not a directory\)"):
        load_mnist(tmp_path / "t10k-images-idx3-ubyte.gz", "train")


def test_load_mnist_count_mismatch(tmp_path):
    _fake_mnist(tmp_path, "train", n=5, n_labels=4)
    with pytest.raises(DataFormatError, match="count mismatch.*5 images.*4 labels"):
        load_mnist(tmp_path)


def test_load_mnist_refuses_labels_outside_the_10_classes(tmp_path):
    _fake_mnist(tmp_path, "train", n=6)
    labels = np.array([0, 255, 3, 255, 12, 9], np.uint8)
    write_idx(tmp_path / "train-labels-idx1-ubyte", labels)
    expected = (
        r"train-labels-idx1-ubyte: labels outside the 10 classes 0\.\.9: "
        r"12 \(1 time\), 255 \(2 times\) \(3 of the 6 labels\)"
    )
    with pytest.raises(DataFormatError, match=expected):
        load_mnist(tmp_path)
    _fake_mnist(tmp_path, "t10k", n=2)
    with pytest.raises(DataFormatError, match=expected):
        load(f"mnist:{tmp_path}")  # what nnmem train reads: it would build 256 outputs
    _, y = load_mnist(tmp_path, num_classes=256)  # a data set with more classes says so
    np.testing.assert_array_equal(y, labels)


def test_load_mnist_refuses_an_empty_set(tmp_path):
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((0, 28, 28), np.uint8))
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(0, np.uint8))
    with pytest.raises(
        DataFormatError, match=r"train-images-idx3-ubyte: the file holds no image .*\(0, 28, 28\)"
    ):
        load_mnist(tmp_path)


@pytest.mark.parametrize("shape", [(2, 0, 0), (2, 28, 0), (2, 0, 28)])
def test_load_mnist_refuses_images_of_no_pixel(tmp_path, shape):
    for kind in ("train", "t10k"):
        write_idx(tmp_path / f"{kind}-images-idx3-ubyte", np.zeros(shape, np.uint8))
        write_idx(tmp_path / f"{kind}-labels-idx1-ubyte", np.array([0, 1], np.uint8))
    expected = rf"train-images-idx3-ubyte: the images are empty: .*{re.escape(str(shape))}"
    with pytest.raises(DataFormatError, match=expected):
        load_mnist(tmp_path)
    with pytest.raises(DataFormatError, match=expected):
        load(f"mnist:{tmp_path}")  # what `nnmem train --data mnist:DIR` reads


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gz"])
def test_load_mnist_refuses_an_image_file_no_array_can_hold(tmp_path, compress):
    suffix = ".gz" if compress else ""
    payload = _idx_header(0x08, [0, 2**32 - 1, 2**32 - 1])  # the images alone: 16 EiB
    (tmp_path / f"train-images-idx3-ubyte{suffix}").write_bytes(
        gzip.compress(payload) if compress else payload
    )
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(0, np.uint8))
    with pytest.raises(DataFormatError, match=r"train-images-idx3-ubyte.*more than any NumPy"):
        load_mnist(tmp_path)


def test_load_mnist_swapped_files(tmp_path):
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros(5, np.uint8))
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(5, np.uint8))
    with pytest.raises(DataFormatError, match="expected uint8 images"):
        load_mnist(tmp_path)


def test_load_mnist_rejects_unknown_kind(tmp_path):
    with pytest.raises(ValueError, match="kind"):
        load_mnist(tmp_path, "test")


# ----------------------------------------------------------------------------- CIFAR-10


def _fake_cifar(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    y = rng.integers(0, 10, size=n).astype(np.int32)
    return x, y


def test_cifar_round_trip_and_plane_order(tmp_path):
    x = np.zeros((4, 3, 32, 32), np.uint8)
    x[:, 0] = 10  # R
    x[:, 1] = 20  # G
    x[:, 2] = 30  # B
    x[1, 0, 0, 1] = 99  # record 1, red, row 0, column 1
    x[2, 2, 1, 0] = 77  # record 2, blue, row 1, column 0
    y = np.array([3, 0, 9, 5])
    path = tmp_path / "batch.bin"
    write_cifar10_batch(path, x, y)
    raw = np.frombuffer(path.read_bytes(), np.uint8)
    assert raw.size == 4 * 3073
    records = raw.reshape(4, 3073)
    np.testing.assert_array_equal(records[:, 0], y)
    assert np.all(records[0, 1:1025] == 10) and np.all(records[0, 1025:2049] == 20)
    assert np.all(records[0, 2049:] == 30)
    assert records[1, 1 + 1] == 99  # R plane first, row-major
    assert records[2, 1 + 2048 + 32] == 77  # B plane last, row 1 starts 32 bytes in
    back_x, back_y = read_cifar10_batch(path)
    assert back_x.dtype == np.uint8 and back_x.shape == (4, 3, 32, 32)
    assert back_y.dtype == np.int32
    np.testing.assert_array_equal(back_x, x)
    np.testing.assert_array_equal(back_y, y)


def test_cifar_wrong_size(tmp_path):
    path = tmp_path / "data_batch_1.bin"
    path.write_bytes(bytes(3073 * 2 + 5))
    with pytest.raises(
        DataFormatError, match=r"data_batch_1\.bin.*6151 bytes.*not a multiple of the 3073"
    ):
        read_cifar10_batch(path)
    path.write_bytes(b"")
    with pytest.raises(DataFormatError, match="empty"):
        read_cifar10_batch(path)


def test_cifar_label_out_of_range(tmp_path):
    records = np.zeros((3, 3073), np.uint8)
    records[2, 0] = 12
    path = tmp_path / "bad.bin"
    path.write_bytes(records.tobytes())
    with pytest.raises(
        DataFormatError, match=r"bad\.bin: label 12 in record 2 is out of range 0\.\.9"
    ):
        read_cifar10_batch(path)
    with pytest.raises(ValueError, match="label 12"):
        write_cifar10_batch(tmp_path / "w.bin", np.zeros((1, 3, 32, 32), np.uint8), [12])


def test_load_cifar10(tmp_path):
    x1, y1 = _fake_cifar(4, seed=1)
    x3, y3 = _fake_cifar(2, seed=3)
    xt, yt = _fake_cifar(3, seed=9)
    write_cifar10_batch(tmp_path / "data_batch_1.bin", x1, y1)
    write_cifar10_batch(tmp_path / "data_batch_3.bin", x3, y3)
    write_cifar10_batch(tmp_path / "test_batch.bin", xt, yt)
    x_train, y_train, x_test, y_test = load_cifar10(tmp_path)
    assert x_train.shape == (6, 3, 32, 32) and x_train.dtype == np.float32
    assert x_test.shape == (3, 3, 32, 32) and x_test.dtype == np.float32
    assert y_train.dtype == y_test.dtype == np.int32
    np.testing.assert_allclose(x_train * 255, np.concatenate([x1, x3]), atol=1e-4)
    np.testing.assert_allclose(x_test * 255, xt, atol=1e-4)
    assert x_train.min() >= 0 and x_train.max() <= 1
    np.testing.assert_array_equal(y_train, np.concatenate([y1, y3]))
    np.testing.assert_array_equal(y_test, yt)


def test_load_cifar10_missing_files(tmp_path):
    x, y = _fake_cifar(1)
    write_cifar10_batch(tmp_path / "test_batch.bin", x, y)
    with pytest.raises(
        DataFormatError, match=r"looked for any of data_batch_1\.bin.*data_batch_5\.bin"
    ):
        load_cifar10(tmp_path)
    os.remove(tmp_path / "test_batch.bin")
    write_cifar10_batch(tmp_path / "data_batch_2.bin", x, y)
    with pytest.raises(DataFormatError, match=r"looked for test_batch\.bin"):
        load_cifar10(tmp_path)


# ----------------------------------------------------------------------------- batches


def test_one_hot():
    out = one_hot([2, 0, 1], 3)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [[0, 0, 1], [1, 0, 0], [0, 1, 0]])
    assert one_hot(np.array([[1], [0]]), 2, dtype=np.float32).shape == (2, 1, 2)
    assert one_hot(np.array([1]), 2, dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize("labels, bad, index", [([0, 3, 1], 3, 1), ([0, 1, -1], -1, 2)])
def test_one_hot_out_of_range(labels, bad, index):
    with pytest.raises(ValueError, match=rf"label {bad} at index {index} is out of range 0\.\.2"):
        one_hot(labels, 3)


def test_iterate_batches_covers_every_sample_once():
    x = np.arange(10 * 2).reshape(10, 2)
    y = np.arange(10)
    batches = list(iterate_batches(x, y, 3))
    assert [len(yb) for _, yb in batches] == [3, 3, 3, 1]
    seen = np.concatenate([yb for _, yb in batches])
    np.testing.assert_array_equal(np.sort(seen), y)
    assert not np.array_equal(seen, y)  # shuffled
    for xb, yb in batches:
        np.testing.assert_array_equal(xb[:, 0] // 2, yb)  # x and y stay paired


def test_iterate_batches_drop_last_and_no_shuffle():
    x = np.arange(10)
    batches = list(iterate_batches(x, x, 4, shuffle=False, drop_last=True))
    assert [b.tolist() for b, _ in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [len(b) for b, _ in iterate_batches(x, x, 5, drop_last=True)] == [5, 5]
    assert list(iterate_batches(x, x, 11, drop_last=True)) == []


def test_iterate_batches_is_deterministic_per_seed_and_epoch():
    x = np.arange(50)

    def order(**kw):
        return np.concatenate([yb for _, yb in iterate_batches(x, x, 7, **kw)])

    np.testing.assert_array_equal(order(seed=1, epoch=2), order(seed=1, epoch=2))
    assert not np.array_equal(order(seed=1, epoch=2), order(seed=1, epoch=3))
    assert not np.array_equal(order(seed=1), order(seed=2))


def test_iterate_batches_checks_arguments_eagerly():
    with pytest.raises(ValueError, match="10 samples but y has 9"):
        iterate_batches(np.zeros(10), np.zeros(9), 2)
    with pytest.raises(ValueError, match="batch_size"):
        iterate_batches(np.zeros(10), np.zeros(10), 0)


def test_normalize_per_channel():
    x = (
        np.ones((2, 3, 4, 4), np.float32)
        * np.array([1.0, 2.0, 3.0], np.float32)[None, :, None, None]
    )
    out = normalize(x, mean=[1.0, 2.0, 3.0], std=[1.0, 1.0, 1.0])
    assert out.dtype == np.float32 and out.shape == x.shape and np.all(out == 0)
    out = normalize(x, mean=0.0, std=[1.0, 2.0, 4.0])
    np.testing.assert_allclose(out[0, :, 0, 0], [1.0, 1.0, 0.75])
    with pytest.raises(ValueError, match="mean needs 1 or 3 values"):
        normalize(x, mean=[0.0, 0.0], std=1.0)
    with pytest.raises(ValueError, match="std must be"):
        normalize(x, mean=0.0, std=0.0)


# ----------------------------------------------------------------------------- load(spec)


def test_load_digits_spec():
    x_train, y_train, x_test, y_test = load("digits")
    assert x_train.shape == (1437, 1, 28, 28) and x_test.shape == (360, 1, 28, 28)


def test_load_mnist_spec(tmp_path):
    _fake_mnist(tmp_path, "train", n=5, compress=True)
    _fake_mnist(tmp_path, "t10k", n=3)
    x_train, y_train, x_test, y_test = load(f"mnist:{tmp_path}")
    assert x_train.shape == (5, 1, 28, 28) and x_test.shape == (3, 1, 28, 28)
    assert y_train.shape == (5,) and y_test.shape == (3,)


def test_load_cifar10_spec(tmp_path):
    x, y = _fake_cifar(2)
    write_cifar10_batch(tmp_path / "data_batch_1.bin", x, y)
    write_cifar10_batch(tmp_path / "test_batch.bin", x, y)
    x_train, _, x_test, _ = load(f"cifar10:{tmp_path}")
    assert x_train.shape == x_test.shape == (2, 3, 32, 32)


@pytest.mark.parametrize("spec", ["mnist", "cifar10", "imagenet", "mnist:", "digits:foo", ""])
def test_load_bad_spec_lists_accepted_forms(spec):
    with pytest.raises(ValueError, match=r'accepted: "digits".*"mnist:DIR".*"cifar10:DIR"'):
        load(spec)


def test_load_mnist_spec_missing_dir(tmp_path):
    with pytest.raises(DataFormatError, match="not found"):
        load(f"mnist:{tmp_path / 'missing'}")
