"""Checkpoints in SINGA's format: a zip holding ``tensor_dict.npz`` (one ``.npy`` array per
state) and ``states_attr.json`` (each state's type, shape and dtype).

Saving is checked, then atomic: every state's name must come back from a zip member's name
as it was, and the folder must exist; the zip is then written to a temporary file beside the
target and renamed over it only once it is complete and on disk (zip_io.write_zip_atomically),
so a failed or interrupted save leaves the previous checkpoint as it was. A symbolic link is
saved through (its final target is replaced, the link kept), and an existing checkpoint keeps
its permission bits.

Loading is all or nothing, and its memory is bounded by what the model expects:
0. the path must name a regular file (a FIFO would block, /dev/zero would never end), the zip
   may list at most MAX_MEMBERS members (in a directory of at most MAX_DIRECTORY_BYTES), none
   of them twice, and the members read must be stored or deflated, without encryption;
1. states_attr.json (at most MAX_ATTRS_BYTES) is checked first: every entry well formed, the
   model states matching the model's shapes and dtypes, the auxiliary states of a dtype a
   tensor can hold and small enough for the device pool's free bytes;
2. tensor_dict.npz may then be no larger than those states need, so a zip bomb is refused
   before anything is decompressed;
3. each array's .npy header is read (at most numpy's limit, zip_io.NPY_HEADER_LIMIT bytes)
   and checked against states_attr.json before its data is read;
4. model states must be finite, and the auxiliary tensors are allocated;
5. only then are the model's states written.
No pickle is ever loaded. The bounded reading and the atomic writing are zip_io's; this file
holds the format, its limits and its checks, in the order load makes them. (It is over 400
lines because each check has its own message, saying what is wrong and how to fix it.)
"""

import collections
import contextlib
import functools
import json
import math
import os
import zipfile
import zlib
from typing import NamedTuple

import numpy as np

from nnmem import zip_io
from nnmem.interrupts import deferred_interrupts
from nnmem.memory.units import format_bytes
from nnmem.regular_file import open_regular
from nnmem.tensor import Tensor, check_dtype, to_numpy

TENSOR_DICT_FILENAME = "tensor_dict.npz"
STATES_ATTR_FILENAME = "states_attr.json"
MODEL_STATE_TYPE = 0
AUX_STATE_TYPE = 1

MAX_MEMBERS = 1024  # members of a checkpoint's zip read at most (nnmem and SINGA write 2)
# The zip's central directory read at most: MAX_MEMBERS entries of 46 bytes and a name of up
# to 82 (a checkpoint's two take about 150 bytes).
MAX_DIRECTORY_BYTES = MAX_MEMBERS * 128
MAX_ATTRS_BYTES = 16 * 2**20  # a state's entry takes about 70 bytes: room for 200,000 states
_FIX = "give a file written by Model.save_states"
# What np.savez, np.savez_compressed and save write: a member stored otherwise (PPMd, Deflate64,
# ...) or encrypted is foreign, and zipfile cannot read it anyway.
_COMPRESSIONS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
# General purpose flag bits zipfile cannot read: 0 encrypted, 5 patched data, 6 strong encryption.
_UNREADABLE_FLAGS = {0x1: "encrypted", 0x20: "compressed patched data", 0x40: "strongly encrypted"}
_MAX_SPAN = np.iinfo(np.intp).max  # the most bytes an array's nonzero sizes may span


class CheckpointError(ValueError):
    """A file given to load_states is not a usable checkpoint for this model."""


class _State(NamedTuple):
    """One entry of states_attr.json, checked."""

    kind: int  # MODEL_STATE_TYPE or AUX_STATE_TYPE
    shape: tuple
    dtype: np.dtype

    @property
    def nbytes(self):
        return math.prod(self.shape) * self.dtype.itemsize


# -- saving ------------------------------------------------------------------------------------
def save(fpath, model_states, aux_states):
    """Write `model_states` and `aux_states` ({name: Tensor}) as a checkpoint at `fpath`.

    Atomic: afterwards `fpath` is either the complete new checkpoint or, if anything failed
    (a state that cannot be read, a full disk, a KeyboardInterrupt), what it was before.
    Every name and tensor is checked before the file is touched.
    """
    tensors, attrs = {}, {}
    for kind, states in ((MODEL_STATE_TYPE, model_states), (AUX_STATE_TYPE, aux_states)):
        for name, t in states.items():
            _check_name(name)
            if not isinstance(t, Tensor):
                raise TypeError(f"save_states: {name} is a {type(t).__name__}, not a Tensor")
            if name in attrs:
                raise ValueError(
                    f"save_states: the auxiliary state {name!r} has the name of a "
                    "model state; rename it"
                )
            tensors[name] = to_numpy(t)
            attrs[name] = {"state_type": kind, "shape": list(t.shape), "dtype": str(t.dtype)}
    members = {
        TENSOR_DICT_FILENAME: zip_io.npz_bytes(tensors),
        STATES_ATTR_FILENAME: json.dumps(attrs),
    }
    zip_io.write_zip_atomically(_save_target(fpath), members)


def _check_name(name):
    """A state's name must come back from the file as it was: a str that a zip member's name
    (NAME.npy, zip_io.npy_name_fits) can hold."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"save_states: a state's name must be a non-empty str, not {name!r}")
    if not zip_io.npy_name_fits(name):
        raise ValueError(
            f"save_states: the state name {_short(name)} cannot be stored in a zip (it must be "
            f"UTF-8 of at most {zip_io.MAX_NPY_NAME_BYTES} bytes, without NUL); rename it"
        )


def _save_target(fpath):
    """The file a save replaces: `fpath`'s final target, so that a symbolic link stays a link
    to the new checkpoint; it must not be a folder, and its folder must exist."""
    path = _checked_path("save_states", fpath)
    target = os.path.realpath(path)
    if os.path.isdir(target):
        raise IsADirectoryError(
            f"save_states: {path!r} is a folder; give the path of a file, e.g. "
            f"{os.path.join(path, 'checkpoint.zip')!r}"
        )
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"save_states: cannot write {path!r}: the folder {folder!r} does not exist or is "
            "not a folder; create it first"
        )
    return target


def _checked_path(caller, fpath, alternative=""):
    """`fpath` (str, bytes or os.PathLike) as a str; TypeError naming the argument otherwise."""
    try:
        return os.fsdecode(fpath)
    except TypeError:
        raise TypeError(
            f"{caller}: fpath must be a path (str, bytes or os.PathLike){alternative}, "
            f"not {type(fpath).__name__}"
        ) from None


# -- loading -----------------------------------------------------------------------------------
def load(fpath, model_states):
    """Read the checkpoint at `fpath` into `model_states` ({name: Tensor}, not empty) and
    return its auxiliary states as new tensors {name: Tensor} on the same device.

    Everything is read and checked, and the auxiliary tensors allocated, before any model
    state is written: on any error (CheckpointError, or OutOfMemory for the auxiliary
    tensors) the model is as it was.
    """
    if not (hasattr(fpath, "read") and hasattr(fpath, "seek")):  # an open binary file is read
        fpath = _checked_path("load_states", fpath, " or an open binary file")
    dev = next(iter(model_states.values())).device
    arrays, states = _read_checked(fpath, model_states, dev)
    for name, state in states.items():
        if state.kind == MODEL_STATE_TYPE:
            _check_finite(fpath, name, arrays[name])
    aux = {  # of the saved dtype (from_numpy would make an int64 counter int32)
        name: Tensor(state.shape, dev, state.dtype, data=arrays[name], requires_grad=False)
        for name, state in states.items()
        if state.kind == AUX_STATE_TYPE
    }
    with deferred_interrupts():  # all the parameters of the file, or none of them
        for name, t in model_states.items():
            t.copy_from_numpy(arrays[name])
    return aux


def _read_checked(fpath, model_states, dev):
    """The checkpoint's arrays {name: ndarray} and entries {name: _State}, every one checked
    against the model and the device; CheckpointError naming the first problem otherwise."""
    try:
        with _opened(fpath) as f:
            _check_directory(fpath, f)
            with zipfile.ZipFile(f) as zf:
                names = zf.namelist()
                twice = sorted(name for name, n in collections.Counter(names).items() if n > 1)
                if twice:  # zipfile reads the last copy, other tools the first: ambiguous
                    raise _unreadable(fpath, f"the zip holds {_short(twice)} more than once")
                if not {TENSOR_DICT_FILENAME, STATES_ATTR_FILENAME} <= set(names):
                    raise CheckpointError(
                        f"{fpath}: a zip without {TENSOR_DICT_FILENAME} and "
                        f"{STATES_ATTR_FILENAME}; {_FIX}"
                    )
                for name in (STATES_ATTR_FILENAME, TENSOR_DICT_FILENAME):
                    _check_member(fpath, zf.getinfo(name))
                states = _parse_attrs(fpath, _read_attrs(fpath, zf))
                _check_model_states(fpath, states, model_states)
                _check_aux_states(fpath, states, dev)
                return _read_arrays(fpath, zf, states), states
    except CheckpointError:
        raise
    except (
        zipfile.BadZipFile,
        OSError,
        EOFError,
        ValueError,
        KeyError,
        zlib.error,
        NotImplementedError,  # what zipfile raises for a feature it lacks (checked above)
    ) as e:
        raise CheckpointError(
            f"{fpath}: not a readable checkpoint ({type(e).__name__}: {e}); {_FIX}"
        ) from e


def _opened(fpath):
    """A context manager giving the checkpoint as a binary file: `fpath` itself if it is one,
    else the file at the path `fpath`, which must be a regular file (regular_file.py: a FIFO
    would block, a device such as /dev/zero would be read without end)."""
    if not isinstance(fpath, str):
        return contextlib.nullcontext(fpath)
    return open_regular(fpath, lambda problem: _unreadable(fpath, problem))


def _check_directory(fpath, f):
    """The zip's central directory is small: at most MAX_MEMBERS members in at most
    MAX_DIRECTORY_BYTES, checked before zipfile reads it (zip_io.directory_size), so that a
    file of many empty members cannot take memory out of proportion to any checkpoint."""
    members, directory = zip_io.directory_size(f)
    if members > MAX_MEMBERS or directory > MAX_DIRECTORY_BYTES:
        raise _unreadable(
            fpath,
            f"the zip lists {members} members in a directory of {directory} bytes, where a "
            f"checkpoint has 2 in about 150 (at most {MAX_MEMBERS} members in "
            f"{MAX_DIRECTORY_BYTES} bytes are read)",
        )


def _check_member(fpath, info, container=None):
    """A zip member that zipfile reads without a password: stored or deflated, not encrypted."""
    where = _short(info.filename) + (f" in {container}" if container else "")
    flags = [what for bit, what in _UNREADABLE_FLAGS.items() if info.flag_bits & bit]
    if flags:
        raise _unreadable(
            fpath,
            f"{where} is {' and '.join(flags)} (zip flag bits {info.flag_bits:#06x}), "
            "which zipfile cannot read and Model.save_states never writes",
        )
    if info.compress_type not in _COMPRESSIONS:
        raise _unreadable(
            fpath,
            f"{where} uses zip compression method {info.compress_type}, where a checkpoint's "
            f"members are {' or '.join(_COMPRESSIONS.values())} "
            f"(methods {', '.join(map(str, _COMPRESSIONS))})",
        )


def _unreadable(fpath, problem):
    return CheckpointError(f"{fpath}: not a readable checkpoint: {problem}; {_FIX}")


def _read_attrs(fpath, zf):
    """states_attr.json parsed, read only if its size is plausible."""
    size = zf.getinfo(STATES_ATTR_FILENAME).file_size
    if size > MAX_ATTRS_BYTES:
        raise _unreadable(
            fpath,
            f"{STATES_ATTR_FILENAME} is {size} bytes, more than the "
            f"{MAX_ATTRS_BYTES} ({format_bytes(MAX_ATTRS_BYTES)}) any "
            "checkpoint's list of states takes",
        )
    try:
        return json.loads(zf.read(STATES_ATTR_FILENAME))
    except RecursionError:  # json recurses once per nesting level
        raise _unreadable(
            fpath,
            f"{STATES_ATTR_FILENAME} nests JSON deeper than Python can "
            "parse, where a checkpoint has one level of entries",
        ) from None


def _parse_attrs(fpath, attrs):
    """{name: _State} from the parsed states_attr.json."""
    if not isinstance(attrs, dict):
        raise _unreadable(
            fpath,
            f"{STATES_ATTR_FILENAME} holds {_short(attrs)}, not an object "
            "{name: {state_type, shape, dtype}}",
        )
    return {name: _parse_entry(fpath, name, entry) for name, entry in attrs.items()}


def _parse_entry(fpath, name, entry):
    """One state's entry: {"state_type": 0 or 1, "shape": [sizes], "dtype": "float32"}."""

    def bad(problem):
        return _unreadable(
            fpath,
            f"in {STATES_ATTR_FILENAME}, {name!r} {problem} (an entry is "
            '{"state_type": 0 or 1, "shape": [sizes], "dtype": "float32"})',
        )

    if not isinstance(entry, dict):
        raise bad(f"is {_short(entry)}, not an object")
    missing = [key for key in ("state_type", "shape", "dtype") if key not in entry]
    if missing:
        raise bad(f"has no {' and no '.join(missing)}")
    kind, shape, dtype = entry["state_type"], entry["shape"], entry["dtype"]
    # type() is, not isinstance: JSON true and 1.0 are not a state type or a size
    if type(kind) is not int or kind not in (MODEL_STATE_TYPE, AUX_STATE_TYPE):
        raise bad(f"has state_type {_short(kind)}, not 0 (model) or 1 (auxiliary)")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise bad(f"has shape {_short(shape)}, not a list of sizes >= 0")
    try:
        dtype = np.dtype(dtype) if isinstance(dtype, str) else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None:
        raise bad(f"has dtype {_short(entry['dtype'])}, not the name of a NumPy dtype")
    # NumPy refuses a shape whose nonzero sizes span more bytes than it can address, even an
    # empty one (0 x 10**30): refused here, before numpy would overflow reading its header.
    if math.prod(d for d in shape if d) * dtype.itemsize > _MAX_SPAN:
        raise bad(f"has shape {_short(shape)}, larger than any array can be")
    return _State(kind, tuple(shape), dtype)


def _short(value, limit=60):
    """A value for an error message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _check_model_states(fpath, states, model_states):
    """The checkpoint's model states are the model's, of the same shapes and dtypes."""
    saved = {name for name, s in states.items() if s.kind == MODEL_STATE_TYPE}
    missing, unknown = sorted(set(model_states) - saved), sorted(saved - set(model_states))
    if missing or unknown:
        raise CheckpointError(
            f"{fpath}: the checkpoint does not match this model (missing "
            f"{missing}, unexpected {unknown}); was it saved from another "
            "model class or configuration?"
        )
    wrong = [
        f"{name} is {states[name].shape} {states[name].dtype} in the file but "
        f"{t.shape} {t.dtype} in the model"
        for name, t in sorted(model_states.items())
        if (states[name].shape, states[name].dtype) != (t.shape, t.dtype)
    ]
    if wrong:
        raise CheckpointError(f"{fpath}: " + "; ".join(wrong))


def _check_aux_states(fpath, states, dev):
    """Every auxiliary state has a dtype a tensor can hold, and together they fit in the
    pool's free bytes (allocation may still fail if the free bytes are fragmented)."""
    aux = {name: s for name, s in states.items() if s.kind == AUX_STATE_TYPE}
    for name, s in aux.items():
        try:
            check_dtype(s.dtype)
        except TypeError as e:
            raise CheckpointError(
                f"{fpath}: the auxiliary state {name!r} cannot be loaded: {e}, then save it again"
            ) from None
    need = sum(s.nbytes for s in aux.values())
    free = dev.memory_stats()["free_bytes"]
    if need > free:
        largest = max(aux, key=lambda name: aux[name].nbytes)
        raise CheckpointError(
            f"{fpath}: the auxiliary states need {format_bytes(need)} ({need} bytes; the largest, "
            f"{largest!r}, is {aux[largest].shape} {aux[largest].dtype}) but the device pool has "
            f"{format_bytes(free)} ({free} bytes) free; load on a device with a larger pool, "
            "e.g. device.create_cpu_device('4GiB'), or pass less in aux_states when saving"
        )


def _read_arrays(fpath, zf, states):
    """{name: ndarray} from tensor_dict.npz, which must hold exactly `states`."""
    shapes = {name: (s.shape, s.dtype) for name, s in states.items()}
    size, limit = zf.getinfo(TENSOR_DICT_FILENAME).file_size, zip_io.npz_size_limit(shapes)
    if size > limit:
        raise _unreadable(
            fpath,
            f"{TENSOR_DICT_FILENAME} decompresses to {format_bytes(size)} "
            f"({size} bytes) but the states that {STATES_ATTR_FILENAME} "
            f"lists take at most {limit} bytes in it: the file is damaged, "
            "or made to exhaust memory (a zip bomb)",
        )
    refuse = functools.partial(_unreadable, fpath)
    with zip_io.opened_npz(zf, TENSOR_DICT_FILENAME) as npz:
        members = _npy_members(fpath, npz, states)
        return {
            name: zip_io.read_npy(npz, info, *shapes[name], STATES_ATTR_FILENAME, refuse)
            for name, info in members.items()
        }


def _npy_members(fpath, npz, states):
    """{state name: ZipInfo} of the npz, whose members are exactly one NAME.npy per state."""
    infos = npz.infolist()
    not_npy = [info.filename for info in infos if not info.filename.endswith(".npy")]
    if not_npy:
        raise _unreadable(
            fpath,
            f"{TENSOR_DICT_FILENAME} holds {_short(not_npy)}, which "
            "are not .npy arrays (an npz holds only NAME.npy members)",
        )
    members = {info.filename[: -len(".npy")]: info for info in infos}
    if len(members) != len(infos) or set(members) != set(states):
        raise CheckpointError(
            f"{fpath}: {STATES_ATTR_FILENAME} and {TENSOR_DICT_FILENAME} list "
            f"different tensors; the file is corrupt or foreign; {_FIX}"
        )
    for info in infos:
        _check_member(fpath, info, TENSOR_DICT_FILENAME)
    return members


def _check_finite(fpath, name, array):
    """A model state holds no NaN or infinity (a model saved after its training diverged)."""
    if array.dtype.kind != "f":
        return
    bad = array.size - np.count_nonzero(np.isfinite(array))
    if bad:
        raise CheckpointError(
            f"{fpath}: {name} holds {bad} NaN or infinite values (of {array.size}); the model "
            "was saved after its training diverged: load an earlier checkpoint, or train again "
            "with a lower learning rate"
        )
