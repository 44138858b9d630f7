"""Open a file for reading only if it is a regular file.

A reader that trusts open() can be made to hang or to read without end: a FIFO (named pipe)
blocks until someone writes to it, and a device such as /dev/zero never ends. The checkpoint
loader and the data loaders read user-given paths, so both open them here: the path is
checked before it is opened, opened without blocking (a FIFO put in its place meanwhile
cannot hang), and checked again once open.
"""

import os
import stat

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path, refuse):
    """`path` (a str) opened for binary reading, if it names a regular file (symbolic links
    are followed). Otherwise raises ``refuse(problem)``, where problem says what the path is,
    e.g. "it is a FIFO (named pipe), not a regular file". A missing path raises the usual
    FileNotFoundError."""
    _check(refuse, os.stat(path))
    nonblocking = getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | nonblocking)
    try:
        _check(refuse, os.fstat(fd))
        if nonblocking:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _check(refuse, st):
    """refuse(...) unless `st` (an os.stat result) is that of a regular file."""
    if stat.S_ISREG(st.st_mode):
        return
    kind = next((what for test, what in _KINDS if test(st.st_mode)), "not a file")
    raise refuse(f"it is {kind}, not a regular file")
