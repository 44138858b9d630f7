"""The error raised when a data file or data set is missing, malformed or inconsistent."""

from __future__ import annotations

import os

__all__ = ["DataFormatError"]


class DataFormatError(ValueError):
    """A data file is missing, is not in the expected format, or disagrees with its partner file.

    The message always names the file (or directory), says what is wrong with it,
    and ends with a "How to fix it:" line. It is a :class:`ValueError`, so code that
    already catches ``ValueError`` keeps working.
    """


def _format_error(path: str | os.PathLike | None, problem: str, fix: str) -> DataFormatError:
    """Build (not raise) a DataFormatError whose text is
    "<path>: <problem>\\nHow to fix it: <fix>"."""
    where = f"{os.fspath(path)}: " if path is not None else ""
    return DataFormatError(f"{where}{problem}\nHow to fix it: {fix}")


def _plural(n: int, word: str) -> str:
    """Count and noun for a message: 1 byte, 2 bytes."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _not_a_file(path: str | os.PathLike, problem: str) -> DataFormatError:
    """The error for a path that names something else than a regular file (regular_file.py
    says what: a folder, a FIFO, a device)."""
    return _format_error(
        path,
        f"cannot read it as a data file: {problem}.",
        "pass the path of the file itself (a FIFO would block, a device never end).",
    )


def _not_a_folder(directory: str) -> str:
    """What to add to "files not found" when `directory` is no folder at all ("" if it is)."""
    if os.path.isdir(directory):
        return ""
    if os.path.exists(directory):
        return " (it is not a directory)"
    return " (the directory does not exist)"
