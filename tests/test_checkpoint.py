"""Checkpoints: a failed save keeps the old file, a failed load changes nothing, hostile files
(zip bombs, huge or malformed headers, odd JSON) get a CheckpointError naming the problem
before they cost memory.

Every hostile file is built here with zipfile and NumPy's .npy header writer.
"""

import errno
import io
import json
import os
import struct
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

from nnmem import device, layer, model, tensor
from nnmem.memory.errors import OutOfMemory
from nnmem.model import CheckpointError

try:
    import resource
except ImportError:  # not on Windows, where the tests that use it are skipped
    resource = None

MiB = 2**20


class MLP(model.Model):
    def __init__(self):
        super().__init__()
        self.fc1 = layer.Linear(16)
        self.fc2 = layer.Linear(3)

    def forward(self, x):
        return self.fc2(self.fc1(x))


def compiled_mlp(seed=0, pool="16MiB"):
    dev = device.create_cpu_device(pool)
    dev.SetRandSeed(seed)
    m = MLP()
    m.compile([tensor.PlaceHolder((8, 5), dev)], is_train=True)
    return dev, m


def states_of(m):
    return {k: tensor.to_numpy(v) for k, v in m.get_states().items()}


def assert_bit_identical(m, before):
    after = states_of(m)
    assert after.keys() == before.keys()
    for k in before:
        assert after[k].tobytes() == before[k].tobytes(), k


def attrs_of(arrays, aux=()):
    """states_attr.json's content for `arrays`, the names in `aux` being auxiliary states."""
    return {
        name: {"state_type": int(name in aux), "shape": list(a.shape), "dtype": str(a.dtype)}
        for name, a in arrays.items()
    }


def write_checkpoint(path, attrs, npz_bytes):
    """A checkpoint zip from the raw content of its two members."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("tensor_dict.npz", npz_bytes)
        zf.writestr("states_attr.json", attrs if isinstance(attrs, str) else json.dumps(attrs))
    return str(path)


def npz_of(arrays):
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def npy_bytes(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def npy_header(shape):
    """The .npy header np.save would write for float32 data of `shape` (the data left out)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "<f4", "fortran_order": False, "shape": shape}
    )
    return buffer.getvalue()


def npz_with_members(members):
    """An npz whose members' bytes are given as is: {member name: bytes}."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def peak_bytes_of(fn):
    """Run fn() (which must raise CheckpointError); the peak of Python and NumPy allocations."""
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError) as info:
            fn()
        return tracemalloc.get_traced_memory()[1], str(info.value)
    finally:
        tracemalloc.stop()


# -- saving --------------------------------------------------------------------------------------
def test_save_load_round_trip_returns_aux_states_on_the_device(tmp_path):
    dev, m = compiled_mlp()
    path = str(tmp_path / "ckpt.zip")
    epoch = tensor.from_numpy(np.array([3], np.int32), dev)
    m.save_states(path, aux_states={"epoch": epoch})
    saved = states_of(m)
    other_dev, other = compiled_mlp(seed=5)
    aux = other.load_states(path)
    assert list(aux) == ["epoch"] and aux["epoch"].device is other_dev
    np.testing.assert_array_equal(tensor.to_numpy(aux["epoch"]), [3])
    assert_bit_identical(other, saved)
    assert os.listdir(tmp_path) == ["ckpt.zip"]  # no temporary file left beside it


def test_a_checkpoint_larger_than_the_in_memory_spool_round_trips(tmp_path):
    dev, m = compiled_mlp(pool="64MiB")
    path = str(tmp_path / "ckpt.zip")
    big = np.zeros(5 * 2**20, np.float32)  # 20 MiB: tensor_dict.npz goes to a temp file
    big[::4096] = np.arange(1, 1281)  # mostly zeros, which deflate compresses fast
    m.save_states(path, aux_states={"big": tensor.from_numpy(big, dev)})
    other_dev, other = compiled_mlp(seed=5, pool="64MiB")
    aux = other.load_states(path)
    np.testing.assert_array_equal(tensor.to_numpy(aux["big"]), big)
    assert_bit_identical(other, states_of(m))


@pytest.mark.parametrize(
    "failure",
    [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left")],
    ids=["ctrl-c", "disk-full"],
)
def test_a_save_that_fails_midway_keeps_the_old_checkpoint(tmp_path, monkeypatch, failure):
    dev, m = compiled_mlp()
    path = tmp_path / "ckpt.zip"
    m.save_states(str(path))
    good = path.read_bytes()
    real_writestr = zipfile.ZipFile.writestr
    calls = []

    def writestr_then_fail(self, name, data, *args, **kwargs):  # the first member is written
        calls.append(name)
        if len(calls) > 1:
            raise failure
        return real_writestr(self, name, data, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "writestr", writestr_then_fail)
    with pytest.raises(type(failure)):
        m.save_states(str(path))
    assert len(calls) == 2
    monkeypatch.undo()
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["ckpt.zip"]
    _, other = compiled_mlp(seed=5)
    other.load_states(str(path))
    assert_bit_identical(other, states_of(m))


def test_a_save_with_an_unwritten_state_keeps_the_old_checkpoint(tmp_path):
    dev, m = compiled_mlp()
    path = tmp_path / "ckpt.zip"
    m.save_states(str(path))
    good = path.read_bytes()
    with pytest.raises(RuntimeError, match="before anything wrote it"):
        m.save_states(str(path), aux_states={"never_written": tensor.Tensor((3,), dev)})
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["ckpt.zip"]


@pytest.mark.skipif(os.name != "posix", reason="file modes and umask are POSIX")
def test_a_saved_checkpoint_has_the_permissions_open_would_give(tmp_path):
    dev, m = compiled_mlp()
    path = tmp_path / "ckpt.zip"
    previous = os.umask(0o022)
    try:
        m.save_states(str(path))
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644  # not the 0o600 of a temporary file


def test_an_aux_state_named_like_a_model_state_is_refused(tmp_path):
    dev, m = compiled_mlp()
    with pytest.raises(ValueError, match="'fc1.W' has the name of a model state"):
        m.save_states(
            str(tmp_path / "ckpt.zip"),
            aux_states={"fc1.W": tensor.from_numpy(np.zeros(1, np.float32), dev)},
        )
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("name", ["file", "allow_pickle", "ünïcode/with slash"])
def test_an_aux_state_of_any_str_name_round_trips(tmp_path, name):
    """Names reach the file as zip member names, never as keyword arguments (np.savez took
    "allow_pickle" for its own and left the state out of a file it then wrote)."""
    dev, m = compiled_mlp()
    path = str(tmp_path / "ckpt.zip")
    m.save_states(path, aux_states={name: tensor.from_numpy(np.arange(3, dtype=np.int32), dev)})
    aux = compiled_mlp(seed=5)[1].load_states(path)
    np.testing.assert_array_equal(tensor.to_numpy(aux[name]), [0, 1, 2])


@pytest.mark.parametrize(
    "name, error, message",
    [
        (7, TypeError, "a state's name must be a non-empty str, not 7"),
        ("", TypeError, "a state's name must be a non-empty str, not ''"),
        ("a\0b", ValueError, "cannot be stored in a zip"),
        ("x" * 70_000, ValueError, "cannot be stored in a zip"),
        ("\ud800", ValueError, "cannot be stored in a zip"),
    ],
    ids=["int", "empty", "nul", "too-long", "lone-surrogate"],
)
def test_a_name_a_zip_cannot_hold_is_refused_before_the_file_is_touched(
    tmp_path, name, error, message
):
    dev, m = compiled_mlp()
    path = tmp_path / "ckpt.zip"
    m.save_states(str(path))
    old = path.read_bytes()
    with pytest.raises(error, match=message):
        m.save_states(str(path), aux_states={name: tensor.from_numpy(np.ones(2, np.float32), dev)})
    assert path.read_bytes() == old
    assert os.listdir(tmp_path) == ["ckpt.zip"]


def test_an_int64_aux_state_comes_back_int64(tmp_path):
    """int64 (the device's random-number counters) beyond int32's range round-trips:
    load_states must not pass it through from_numpy, which makes integers int32."""
    dev, m = compiled_mlp()
    counter = tensor.Tensor((2,), dev, np.int64, requires_grad=False)
    counter.copy_from_numpy(np.array([2**40, -3], np.int64))
    m.save_states(str(tmp_path / "ckpt.zip"), aux_states={"counter": counter})
    aux = compiled_mlp(seed=5)[1].load_states(str(tmp_path / "ckpt.zip"))
    assert aux["counter"].dtype == np.int64
    np.testing.assert_array_equal(tensor.to_numpy(aux["counter"]), [2**40, -3])


@pytest.mark.parametrize("where", ["missing-folder", "file-as-folder", "a-folder"])
def test_a_save_to_a_path_that_cannot_be_a_file_names_that_path(tmp_path, where):
    dev, m = compiled_mlp()
    (tmp_path / "plain").write_text("x")
    path, error, message = {
        "missing-folder": (tmp_path / "no" / "ckpt.zip", FileNotFoundError, "does not exist"),
        "file-as-folder": (tmp_path / "plain" / "ckpt.zip", FileNotFoundError, "not a folder"),
        "a-folder": (tmp_path, IsADirectoryError, "is a folder; give the path of a file"),
    }[where]
    with pytest.raises(error, match=message) as info:
        m.save_states(str(path))
    assert repr(str(path)) in str(info.value) and ".nnmem-save-" not in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["plain"]


# -- loading is all or nothing ------------------------------------------------------------------
@pytest.mark.parametrize(
    "aux",
    [np.zeros(4, np.int8), np.zeros(4, np.complex64), np.zeros(4, np.uint64)],
    ids=lambda a: str(a.dtype),
)
def test_an_aux_state_of_an_unsupported_dtype_changes_nothing(tmp_path, aux):
    dev, m = compiled_mlp()
    arrays = states_of(compiled_mlp(seed=5)[1])  # values of another model: a write would show
    arrays["aux"] = aux
    path = write_checkpoint(tmp_path / "c.zip", attrs_of(arrays, aux={"aux"}), npz_of(arrays))
    before = states_of(m)
    expected = f"auxiliary state 'aux' cannot be loaded.*not {aux.dtype}"
    with pytest.raises(CheckpointError, match=expected):
        m.load_states(path)
    assert_bit_identical(m, before)


def test_an_aux_state_larger_than_the_pool_is_refused_unread_and_changes_nothing(tmp_path):
    dev, m = compiled_mlp(pool="16MiB")
    arrays = states_of(compiled_mlp(seed=5)[1])
    arrays["big"] = np.zeros(32 * MiB // 4, np.float32)  # 32 MiB of data, deflated to ~32 KiB
    path = write_checkpoint(tmp_path / "c.zip", attrs_of(arrays, aux={"big"}), npz_of(arrays))
    del arrays
    before = states_of(m)
    peak, message = peak_bytes_of(lambda: m.load_states(path))
    assert "auxiliary states need 32.0 MiB" in message
    assert f"{dev.memory_stats()['free_bytes']} bytes) free" in message
    assert peak < 4 * MiB  # the 32 MiB were never decompressed
    assert_bit_identical(m, before)


def test_an_aux_state_that_does_not_fit_a_fragmented_pool_changes_nothing(tmp_path):
    dev, m = compiled_mlp(pool="16MiB")
    arrays = states_of(compiled_mlp(seed=5)[1])
    arrays["aux"] = np.ones(3 * MiB // 4, np.float32)
    path = write_checkpoint(tmp_path / "c.zip", attrs_of(arrays, aux={"aux"}), npz_of(arrays))
    blocks = []  # fill the pool with 1 MiB blocks, then free every other one
    while dev.memory_stats()["free_bytes"] >= MiB:
        blocks.append(tensor.from_numpy(np.zeros(MiB // 4, np.float32), dev))
    del blocks[::2]
    assert dev.memory_stats()["free_bytes"] > 3 * MiB > dev.memory_stats()["largest_free_block"]
    before = states_of(m)
    with pytest.raises(OutOfMemory):  # the aux tensors are allocated before any write
        m.load_states(path)
    assert_bit_identical(m, before)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_parameter_is_refused_and_changes_nothing(tmp_path, bad):
    dev, m = compiled_mlp()
    arrays = states_of(compiled_mlp(seed=5)[1])
    arrays["fc2.b"][1] = bad
    path = write_checkpoint(tmp_path / "c.zip", attrs_of(arrays), npz_of(arrays))
    before = states_of(m)
    expected = r"fc2\.b holds 1 NaN or infinite values \(of 3\).*earlier checkpoint"
    with pytest.raises(CheckpointError, match=expected):
        m.load_states(path)
    assert_bit_identical(m, before)


# -- bounded reading ----------------------------------------------------------------------------
def test_a_zip_bomb_is_refused_before_it_is_decompressed(tmp_path):
    dev, m = compiled_mlp()
    attrs = attrs_of(states_of(m))  # honest attributes, but tensor_dict.npz is 128 MiB of zeros
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("states_attr.json", json.dumps(attrs))
        with zf.open("tensor_dict.npz", "w", force_zip64=True) as f:
            zeros = bytes(16 * MiB)
            for _ in range(8):
                f.write(zeros)
            del zeros
    assert path.stat().st_size < 2 * MiB
    before = states_of(m)
    peak, message = peak_bytes_of(lambda: m.load_states(str(path)))
    assert "tensor_dict.npz decompresses to 128.0 MiB" in message and "zip bomb" in message
    assert peak < 4 * MiB
    assert_bit_identical(m, before)


@pytest.mark.parametrize("shape", [(2**40,), (5, 16, 2**32)], ids=["4TiB", "model-shape-times-4G"])
def test_an_npy_header_announcing_more_than_the_model_is_refused_unread(tmp_path, shape):
    dev, m = compiled_mlp()
    arrays = states_of(compiled_mlp(seed=5)[1])
    members = {f"{k}.npy": npy_bytes(a) for k, a in arrays.items()}
    members["fc1.W.npy"] = npy_header(shape) + arrays["fc1.W"].tobytes()
    path = write_checkpoint(tmp_path / "c.zip", attrs_of(arrays), npz_with_members(members))
    before = states_of(m)
    peak, message = peak_bytes_of(lambda: m.load_states(path))
    assert (
        f"fc1.W.npy says {shape} float32 in its header but states_attr.json says (5, 16) float32"
    ) in message
    assert peak < 4 * MiB
    assert_bit_identical(m, before)


def test_an_aux_state_announcing_4_tib_is_refused_with_the_figures(tmp_path):
    dev, m = compiled_mlp()
    arrays = states_of(compiled_mlp(seed=5)[1])
    members = {f"{k}.npy": npy_bytes(a) for k, a in arrays.items()}
    members["huge.npy"] = npy_header((2**40,))
    attrs = attrs_of(arrays)
    attrs["huge"] = {"state_type": 1, "shape": [2**40], "dtype": "float32"}
    path = write_checkpoint(tmp_path / "c.zip", attrs, npz_with_members(members))
    before = states_of(m)
    expected = r"auxiliary states need 4\.0 TiB .*'huge'.*larger pool"
    with pytest.raises(CheckpointError, match=expected):
        m.load_states(path)
    assert_bit_identical(m, before)


def test_an_npy_header_longer_than_numpys_limit_is_refused_unread(tmp_path):
    dev, m = compiled_mlp()
    arrays = states_of(compiled_mlp(seed=5)[1])
    members = {f"{k}.npy": npy_bytes(a) for k, a in arrays.items()}
    # Version 2.0 stores the header's length in 4 bytes: this one says 4 GiB - 1.
    members["fc1.W.npy"] = b"\x93NUMPY\x02\x00" + (2**32 - 1).to_bytes(4, "little") + b" " * 64
    path = write_checkpoint(tmp_path / "c.zip", attrs_of(arrays), npz_with_members(members))
    before = states_of(m)
    expected = r"fc1\.W\.npy has a header of 4\.0 GiB .*limit of 10000"
    with pytest.raises(CheckpointError, match=expected):
        m.load_states(path)
    assert_bit_identical(m, before)


def test_an_npy_member_larger_than_its_header_and_data_is_refused(tmp_path):
    dev, m = compiled_mlp()
    arrays = states_of(compiled_mlp(seed=5)[1])
    members = {f"{k}.npy": npy_bytes(a) for k, a in arrays.items()}
    members["fc2.b.npy"] += b"\x00" * 4  # numpy alone would ignore them
    path = write_checkpoint(tmp_path / "c.zip", attrs_of(arrays), npz_with_members(members))
    before = states_of(m)
    expected = r"fc2\.b\.npy is 144 bytes but its header \(128 bytes\) announces 12 bytes"
    with pytest.raises(CheckpointError, match=expected):
        m.load_states(path)
    assert_bit_identical(m, before)


# -- clear errors for malformed files -------------------------------------------------------------
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda a: 3, r"states_attr\.json holds 3, not an object"),
        (lambda a: list(a), r"states_attr\.json holds \['fc1\.W'.*not an object"),
        (lambda a: {**a, "fc1.W": 3}, r"'fc1\.W' is 3, not an object"),
        (lambda a: {**a, "fc1.W": {"state_type": 0}}, r"'fc1\.W' has no shape and no dtype"),
        (lambda a: {**a, "fc1.W": {**a["fc1.W"], "state_type": 2}}, "has state_type 2, not 0"),
        (lambda a: {**a, "fc1.W": {**a["fc1.W"], "state_type": True}}, "has state_type True"),
        (
            lambda a: {**a, "fc1.W": {**a["fc1.W"], "shape": [5, -16]}},
            r"has shape \[5, -16\], not a",
        ),
        (lambda a: {**a, "fc1.W": {**a["fc1.W"], "shape": [5.0, 16]}}, r"has shape \[5\.0, 16\]"),
        (lambda a: {**a, "fc1.W": {**a["fc1.W"], "shape": "5x16"}}, "has shape '5x16'"),
        (lambda a: {**a, "fc1.W": {**a["fc1.W"], "dtype": 32}}, "has dtype 32, not the name"),
        (lambda a: {**a, "fc1.W": {**a["fc1.W"], "dtype": "float99"}}, "has dtype 'float99'"),
        (lambda a: DEEP, "nests JSON deeper than Python can parse"),
        (
            lambda a: " " * (16 * MiB) + json.dumps(a),
            rf"states_attr\.json is \d+ bytes, more than the {16 * MiB} \(16\.0 MiB\)",
        ),
    ],
    ids=[
        "int",
        "list",
        "entry-int",
        "missing-keys",
        "state-type-2",
        "state-type-bool",
        "negative-size",
        "float-size",
        "string-shape",
        "int-dtype",
        "unknown-dtype",
        "deep",
        "huge",
    ],
)
def test_malformed_attributes_get_a_clear_error_and_change_nothing(tmp_path, edit, message):
    dev, m = compiled_mlp()
    arrays = states_of(compiled_mlp(seed=5)[1])
    attrs = edit(attrs_of(arrays))
    path = write_checkpoint(tmp_path / "c.zip", attrs, npz_of(arrays))
    before = states_of(m)
    with pytest.raises(CheckpointError, match=message) as info:
        m.load_states(path)
    assert "not a readable checkpoint" in str(info.value) and "save_states" in str(info.value)
    assert_bit_identical(m, before)


def test_an_npz_member_that_is_not_npy_gets_a_clear_error(tmp_path):
    dev, m = compiled_mlp()
    arrays = states_of(compiled_mlp(seed=5)[1])
    members = {f"{k}.npy": npy_bytes(a) for k, a in arrays.items()}
    members["fc1.W"] = members.pop("fc1.W.npy")
    path = write_checkpoint(tmp_path / "c.zip", attrs_of(arrays), npz_with_members(members))
    before = states_of(m)
    with pytest.raises(CheckpointError, match=r"holds \['fc1\.W'\], which are not \.npy arrays"):
        m.load_states(path)
    assert_bit_identical(m, before)


def with_zip_headers(data, flag_bits=0, method=None):
    """The zip `data` with every member's general purpose flags or'ed with `flag_bits` and its
    compression method set to `method`, in its local header and in the central directory."""
    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        flags_at = [info.header_offset + 6 for info in zf.infolist()]  # local headers
        entry = zf.start_dir
        for _ in zf.infolist():  # central directory entries
            flags_at.append(entry + 8)
            name, extra, comment = struct.unpack_from("<HHH", out, entry + 28)
            entry += 46 + name + extra + comment
    for at in flags_at:
        struct.pack_into("<H", out, at, struct.unpack_from("<H", out, at)[0] | flag_bits)
        if method is not None:
            struct.pack_into("<H", out, at + 2, method)
    return bytes(out)


@pytest.mark.parametrize("where", ["states_attr.json", "npz-member"])
@pytest.mark.parametrize(
    "flag_bits, method, message",
    [
        (0x1, None, r"is encrypted \(zip flag bits 0x0001\)"),
        (0x40, None, "is strongly encrypted"),
        (0, 98, "uses zip compression method 98"),  # PPMd
        (0, 9, "uses zip compression method 9"),  # Deflate64
    ],
    ids=["encrypted", "strong-encryption", "ppmd", "deflate64"],
)
def test_an_encrypted_or_oddly_compressed_member_gets_a_clear_error(
    tmp_path, where, flag_bits, method, message
):
    dev, m = compiled_mlp()
    arrays = states_of(compiled_mlp(seed=5)[1])
    npz = npz_of(arrays)
    if where == "npz-member":
        npz = with_zip_headers(npz, flag_bits, method)
        message = r"'fc\d\.[Wb]\.npy' in tensor_dict\.npz " + message
    path = write_checkpoint(tmp_path / "c.zip", attrs_of(arrays), npz)
    if where == "states_attr.json":
        data = with_zip_headers((tmp_path / "c.zip").read_bytes(), flag_bits, method)
        (tmp_path / "c.zip").write_bytes(data)
        message = r"'(states_attr\.json|tensor_dict\.npz)' " + message
    before = states_of(m)
    with pytest.raises(CheckpointError, match=message) as info:
        m.load_states(path)  # not zipfile's RuntimeError or NotImplementedError
    assert "not a readable checkpoint" in str(info.value)
    assert_bit_identical(m, before)


# -- paths ---------------------------------------------------------------------------------------
def test_load_states_takes_bytes_and_path_objects_and_names_fpath_for_none(tmp_path):
    dev, m = compiled_mlp()
    path = tmp_path / "ckpt.zip"
    m.save_states(os.fsencode(path))  # bytes, as open() takes them
    assert os.listdir(tmp_path) == ["ckpt.zip"]
    for given in (os.fsencode(path), path, str(path)):
        _, other = compiled_mlp(seed=5)
        other.load_states(given)
        assert_bit_identical(other, states_of(m))
    with pytest.raises(TypeError, match=r"load_states: fpath must be a path .*not NoneType"):
        m.load_states(None)
    with pytest.raises(TypeError, match=r"save_states: fpath must be a path .*not NoneType"):
        m.save_states(None)
    assert os.listdir(tmp_path) == ["ckpt.zip"]


LOAD_IN_A_CHILD = """
import sys
import numpy as np
from nnmem import device, tensor
from nnmem.checkpoint import CheckpointError, load
w = tensor.from_numpy(np.zeros(3, np.float32), device.create_cpu_device("1MiB"))
try:
    load(sys.argv[1], {"w": w})
except CheckpointError as e:
    print("CheckpointError:", e)
"""


def load_in_a_child(path):
    """The output of loading `path` in a Python child limited to 1 GiB of address space and
    30 seconds, so that a load that never ends cannot hang or exhaust the test run."""

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))

    result = subprocess.run(
        [sys.executable, "-c", LOAD_IN_A_CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=limit_memory,
    )
    return result.stdout + result.stderr


def test_an_empty_shape_too_large_for_numpy_is_refused_with_the_shape(tmp_path):
    """0 x 10**30 holds nothing, but numpy cannot even describe it (an OverflowError escaped
    from its header reader)."""
    dev, m = compiled_mlp()
    arrays = states_of(m)
    attrs = attrs_of(arrays)
    attrs["aux"] = {"state_type": 1, "shape": [0, 10**30], "dtype": "float32"}
    npz = npz_with_members({f"{k}.npy": npy_bytes(a) for k, a in arrays.items()} | {"aux.npy": b""})
    path = write_checkpoint(tmp_path / "c.zip", attrs, npz)
    before = states_of(m)
    with pytest.raises(CheckpointError, match=r"'aux' has shape \[0, 1000.*larger than any"):
        m.load_states(path)
    assert_bit_identical(m, before)


def test_a_member_listed_twice_is_refused(tmp_path):
    """zipfile reads the last of two members of one name, other tools the first."""
    dev, m = compiled_mlp()
    arrays = states_of(m)
    other = {k: np.full_like(a, 7) for k, a in arrays.items()}
    path = tmp_path / "c.zip"
    with pytest.warns(UserWarning, match="Duplicate name"):
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("tensor_dict.npz", npz_of(arrays))
            zf.writestr("states_attr.json", json.dumps(attrs_of(arrays)))
            zf.writestr("tensor_dict.npz", npz_of(other))
    before = states_of(m)
    with pytest.raises(CheckpointError, match=r"holds \['tensor_dict.npz'\] more than once"):
        m.load_states(str(path))
    assert_bit_identical(m, before)


def zip_of_empty_members(path, members, claimed=()):
    """A zip of `members` empty members (over 65535: with zip64 end records, which hold the
    figures zipfile goes by); its end record may claim other figures, `claimed`: (members,)
    or (members, directory bytes). zipfile reads the directory the figures it uses say."""
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(members):
            zf.writestr(f"{i:x}", b"")
    if claimed:
        data = bytearray(path.read_bytes())
        end = data.rfind(b"PK\x05\x06")
        struct.pack_into("<HH", data, end + 8, claimed[0], claimed[0])
        if len(claimed) > 1:
            struct.pack_into("<L", data, end + 12, claimed[1])
        path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "members, claimed",
    [(2000, ()), (70_000, ()), (20_002, (2,)), (70_000, (2, 100))],
    ids=["2000", "70000", "a-count-of-2", "zip64-behind-a-count-of-2"],
)
def test_a_zip_of_many_members_is_refused_before_its_directory_is_read(tmp_path, members, claimed):
    """zipfile builds an object per member in the directory, about 7 times the file's size in
    memory, before anything can be checked: the directory's count and size are read first
    (the size too: a count of 2 over a directory of 20,002 members got through before)."""
    dev, m = compiled_mlp()
    path = zip_of_empty_members(tmp_path / "c.zip", members, claimed)
    peak, message = peak_bytes_of(lambda: m.load_states(str(path)))
    assert "where a checkpoint has 2 in about 150" in message, message
    assert peak < path.stat().st_size, (peak, path.stat().st_size)


@pytest.mark.skipif(os.name != "posix", reason="FIFOs, /dev/zero and rlimits are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-to-dev-zero", "directory"])
def test_a_path_that_is_not_a_regular_file_is_refused_unopened(tmp_path, kind):
    path = tmp_path / "ckpt.zip"
    if kind == "fifo":
        os.mkfifo(path)  # opening it to read would block until a writer comes
        expected = "it is a FIFO (named pipe), not a regular file"
    elif kind == "directory":
        path.mkdir()
        expected = "it is a directory, not a regular file"
    else:
        expected = "it is a character device, not a regular file"
        if kind == "dev-zero":  # reading it never ends
            path = "/dev/zero"
        else:
            path.symlink_to("/dev/zero")
    output = load_in_a_child(path)
    assert f"CheckpointError: {path}: not a readable checkpoint: {expected}" in output, output


# -- saving through links, keeping modes, long names ----------------------------------------------
@pytest.mark.skipif(os.name != "posix", reason="symbolic links need privileges on Windows")
def test_a_save_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    dev, m = compiled_mlp()
    real = tmp_path / "runs" / "real.ckpt"
    real.parent.mkdir()
    m.save_states(str(real))
    link = tmp_path / "latest.ckpt"
    link.symlink_to(os.path.join("runs", "real.ckpt"))  # relative, as `ln -s` makes them
    _, newer = compiled_mlp(seed=5)
    newer.save_states(str(link))
    assert link.is_symlink() and os.readlink(link) == os.path.join("runs", "real.ckpt")
    _, other = compiled_mlp(seed=7)
    other.load_states(str(real))
    assert_bit_identical(other, states_of(newer))
    assert sorted(os.listdir(tmp_path)) == ["latest.ckpt", "runs"]
    assert os.listdir(real.parent) == ["real.ckpt"]  # no temporary file left


@pytest.mark.skipif(os.name != "posix", reason="file modes and umask are POSIX")
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o664])
def test_overwriting_a_checkpoint_keeps_its_permission_bits(tmp_path, mode):
    dev, m = compiled_mlp()
    path = tmp_path / "ckpt.zip"
    previous = os.umask(0o022)
    try:
        m.save_states(str(path))
        path.chmod(mode)
        m.save_states(str(path))
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == mode


def test_a_checkpoint_name_near_the_file_systems_limit_can_be_saved(tmp_path):
    try:
        name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):
        name_max = 255
    if name_max < 249:
        pytest.skip(f"this file system allows names of {name_max} characters")
    name = "c" * 245 + ".zip"  # 249 characters: the temporary file's name must be shorter
    dev, m = compiled_mlp()
    m.save_states(str(tmp_path / name))
    m.save_states(str(tmp_path / name))
    assert os.listdir(tmp_path) == [name]
    _, other = compiled_mlp(seed=5)
    other.load_states(str(tmp_path / name))
    assert_bit_identical(other, states_of(m))
