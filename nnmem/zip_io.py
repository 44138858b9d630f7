"""Zip archives of .npy arrays (what np.savez writes), read within bounds and written
atomically: the file I/O of a checkpoint, for files a user gives, damaged or made to harm.

Reading takes memory in proportion to what the caller expects, never to what the file claims:
- directory_size reads a zip's end records only (its last 65 KiB, and 76 bytes more for
  zip64), so that the caller can bound the central directory before zipfile reads all of it;
- opened_npz copies a member that is itself a zip (an npz) to a seekable spooled file: at most
  the member's file_size bytes (zipfile stops there), which the caller bounds first
  (npz_size_limit says how large an npz of known arrays can be);
- read_npy reads a .npy member's header only once its length is within numpy's own limit
  (NPY_HEADER_LIMIT), and its data only once the header gives the shape and dtype the caller
  expects and the member holds exactly that header and that data. No pickle is ever loaded.
A file that breaks these bounds is refused by raising ``refuse(problem)``, where problem says in
words what is wrong (as regular_file.py does); a file that is not a zip at all is left to
zipfile's and numpy's own errors (BadZipFile, EOFError, zlib.error, ValueError, ...), for the
caller to catch.

Writing is atomic: write_zip_atomically writes to a temporary file beside the target, puts it
on disk and renames it over the target, so a failed or interrupted write (a full disk, Ctrl-C)
leaves the target as it was, and no temporary file behind. npz_bytes writes one NAME.npy member
per array, under the names as given: npy_name_fits says which names come back as they went in.
"""

import contextlib
import io
import math
import os
import secrets
import shutil
import stat
import struct
import tempfile
import zipfile

import numpy as np

from nnmem.memory.units import format_bytes

NPY_HEADER_LIMIT = 10_000  # numpy's own limit on a .npy header (np.load's max_header_size)
MAX_NPY_NAME_BYTES = 2**16 - 1 - len(".npy")  # a zip member's name takes at most 65535 bytes
# What np.savez writes around an array's data, with room to spare: a .npy header of 128 bytes
# and up to 22 more per dimension, and two zip records of ~60 bytes plus the member's name.
_NPY_HEADER_ALLOWANCE, _NPY_HEADER_PER_DIM = 256, 24
_ZIP_RECORDS_ALLOWANCE = 256
_ZIP_END_RECORDS = 2**16 + 1024  # end-of-archive records, and a comment of at most 64 KiB
# The end of central directory record: its signature, its size without the comment, and where
# it holds the total number of members (APPNOTE.TXT 4.3.16).
_END_RECORD_SIGNATURE, _END_RECORD_SIZE, _END_RECORD_COUNT_AT = b"PK\x05\x06", 22, 10
# Before it, for zip64: the zip64 end record (56 bytes; its member count and directory size
# at byte 32) and its locator (20 bytes).
_ZIP64_END_SIGNATURE, _ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x06", b"PK\x06\x07"
_ZIP64_LOCATOR_SIZE, _ZIP64_COUNT_AT = 20, 32
_ZIP64_RECORDS_SIZE = 56 + _ZIP64_LOCATOR_SIZE
_SPOOL_IN_MEMORY = 16 * 2**20  # an npz larger than this is spooled to a temporary file
_CHUNK = 2**20  # bytes copied at a time
_TEMP_PREFIX, _TEMP_SUFFIX = ".nnmem-save-", ".tmp"


# -- reading -----------------------------------------------------------------------------------
def directory_size(f):
    """(members, bytes) of the central directory of the zip `f` (a seekable binary file), read
    from its end records alone: zipfile reads the whole directory and builds an object for
    every entry in it (about 500 bytes each) before a caller could check anything. The figures
    are those zipfile itself goes by: the end record's, or the zip64 end record's where its
    locator comes right before (APPNOTE.TXT 4.3.14-4.3.16). (0, 0) where there is no end
    record (zipfile will say the file is not a zip). `f` is left at its start."""
    size = f.seek(0, os.SEEK_END)
    tail_size = min(size, _ZIP_END_RECORDS)
    f.seek(size - tail_size)
    tail = f.read(tail_size)
    at = tail.rfind(_END_RECORD_SIGNATURE)
    if at < 0 or at + _END_RECORD_SIZE > len(tail):
        f.seek(0)
        return 0, 0
    members, directory = struct.unpack_from("<HL", tail, at + _END_RECORD_COUNT_AT)
    end = size - tail_size + at  # where the end record starts in the file
    if end >= _ZIP64_RECORDS_SIZE:
        f.seek(end - _ZIP64_RECORDS_SIZE)
        records = f.read(_ZIP64_RECORDS_SIZE)
        locator = records[-_ZIP64_LOCATOR_SIZE:]
        if locator.startswith(_ZIP64_LOCATOR_SIGNATURE) and records.startswith(
            _ZIP64_END_SIGNATURE
        ):
            members, directory = struct.unpack_from("<QQ", records, _ZIP64_COUNT_AT)
    f.seek(0)
    return members, directory


def npz_size_limit(arrays):
    """The most bytes an npz of exactly `arrays` ({name: (shape, dtype)}), as np.savez writes
    it, can take: each array's data, .npy header and zip records (which hold its name twice),
    and the archive's end."""
    return _ZIP_END_RECORDS + sum(
        math.prod(shape) * dtype.itemsize
        + _NPY_HEADER_ALLOWANCE
        + _NPY_HEADER_PER_DIM * len(shape)
        + _ZIP_RECORDS_ALLOWANCE
        + 2 * len(name.encode())
        for name, (shape, dtype) in arrays.items()
    )


@contextlib.contextmanager
def opened_npz(zf, name):
    """The member `name` of the zip `zf`, itself a zip (an npz), opened as a zipfile.ZipFile.

    It is copied first, at most its file_size bytes, to a temporary file (in memory up to
    16 MiB): reading the npz's members straight from a deflated stream would be slower, as
    zipfile seeks backwards in it (to find the npz's index) by decompressing again from the
    start."""
    with (
        zf.open(name) as member,
        tempfile.SpooledTemporaryFile(_SPOOL_IN_MEMORY) as npz_file,
    ):
        shutil.copyfileobj(member, npz_file, _CHUNK)
        npz_file.seek(0)
        with zipfile.ZipFile(npz_file) as npz:
            yield npz


def read_npy(npz, info, shape, dtype, expected_by, refuse):
    """The array of the .npy member `info` of the zip `npz`, which must be of `shape` and
    `dtype` (as `expected_by`, a name for the error, says): its data is read only once its
    header says so and the member's size is exactly that header and that data."""
    with npz.open(info) as f:
        header_shape, header_dtype, header_size = _read_npy_header(info.filename, f, refuse)
    if (header_shape, header_dtype) != (shape, dtype):
        raise refuse(
            f"{info.filename} says {header_shape} {header_dtype} in its header but "
            f"{expected_by} says {shape} {dtype}"
        )
    nbytes = math.prod(shape) * dtype.itemsize
    if info.file_size != header_size + nbytes:
        raise refuse(
            f"{info.filename} is {info.file_size} bytes but its header "
            f"({header_size} bytes) announces {nbytes} bytes of data "
            "after it"
        )
    with npz.open(info) as f:  # all checked: numpy reads the array, a chunk at a time
        return np.lib.format.read_array(f, allow_pickle=False, max_header_size=NPY_HEADER_LIMIT)


def _read_npy_header(filename, f, refuse):
    """(shape, dtype, header size in bytes) of the .npy stream `f`.

    numpy's own header readers read the whole header before checking its length (a 4 GiB
    header would be read), so the length is read and checked here first."""
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        raise refuse(
            f"{filename} is .npy version {version[0]}.{version[1]}, where "
            "np.save writes 1.0, or 2.0 for very long headers"
        )
    length_format = "<H" if version == (1, 0) else "<I"
    length_field = _read_exactly(filename, f, struct.calcsize(length_format), refuse)
    (length,) = struct.unpack(length_format, length_field)
    if length > NPY_HEADER_LIMIT:
        raise refuse(
            f"{filename} has a header of {format_bytes(length)} ({length} "
            f"bytes), more than numpy's limit of {NPY_HEADER_LIMIT} bytes "
            "(np.save writes about 128)"
        )
    header = _read_exactly(filename, f, length, refuse)
    read_header = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    shape, _, dtype = read_header(
        io.BytesIO(length_field + header), max_header_size=NPY_HEADER_LIMIT
    )
    return shape, dtype, np.lib.format.MAGIC_LEN + len(length_field) + length


def _read_exactly(filename, f, n, refuse):
    """`n` bytes from `f` (n is small: a header), or refuse(...) if it ends before."""
    data = f.read(n)
    if len(data) != n:
        raise refuse(f"{filename} ends inside its header")
    return data


# -- writing -----------------------------------------------------------------------------------
def npy_name_fits(name):
    """Whether a zip member NAME.npy holds the str `name` so that it reads back as it was:
    UTF-8 of at most MAX_NPY_NAME_BYTES bytes, without NUL (zipfile cuts a name there)."""
    try:
        return "\0" not in name and len(name.encode("utf-8")) <= MAX_NPY_NAME_BYTES
    except UnicodeEncodeError:  # a lone surrogate
        return False


def npz_bytes(arrays):
    """The bytes of an npz holding `arrays` ({name: ndarray}), as np.savez writes it: one
    stored NAME.npy member each. Written here because np.savez takes the names as keyword
    arguments, where an array called "file" or "allow_pickle" would be taken for its own."""
    npz = io.BytesIO()
    with zipfile.ZipFile(npz, mode="w", compression=zipfile.ZIP_STORED) as zf:
        for name, array in arrays.items():
            with zf.open(name + ".npy", mode="w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)
    return npz.getvalue()


def write_zip_atomically(target, members):
    """Write a zip of `members` ({name: bytes or str}, deflated) to a temporary file beside
    `target` (a file's path with its links resolved, in a folder that exists), flush it to
    disk, then rename it over `target` (a rename is atomic on one file system).

    On any error, KeyboardInterrupt too, `target` is as it was and the temporary file is
    gone."""
    tmp_path, f = _create_beside(target)
    try:
        with f:
            with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_DEFLATED) as zf:
                for name, data in members.items():
                    zf.writestr(name, data)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename: a crash cannot leave a short file
        os.replace(tmp_path, target)
    except BaseException:  # KeyboardInterrupt too: the old file stays, no debris is left
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp_path)
        raise


def _create_beside(target):
    """A new, uniquely named hidden file in `target`'s folder, open for writing: (path, file).

    Its name is short (not derived from the target's: a target name near the file system's
    limit would make it too long). It gets the permission bits of the file it will replace if
    there is one, else those open() would give the target (0o666 less the umask), which
    tempfile.mkstemp would narrow to 0o600."""
    folder = os.path.dirname(os.path.abspath(target))
    try:
        existing = os.stat(target)
        mode = stat.S_IMODE(existing.st_mode) if stat.S_ISREG(existing.st_mode) else None
    except OSError:
        mode = None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    tmp_path = os.path.join(folder, f"{_TEMP_PREFIX}{secrets.token_hex(8)}{_TEMP_SUFFIX}")
    fd = os.open(tmp_path, flags, 0o666)
    try:
        if mode is not None:  # set after creation, so that the umask does not narrow it
            os.chmod(fd if os.chmod in os.supports_fd else tmp_path, mode)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp_path)
        raise
    return tmp_path, os.fdopen(fd, "wb")
