"""Byte sizes for people: parse "512MiB" / "12GiB" / "1000000", and print sizes back."""

import re

_PARSE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
    "PIB": 2**50,  # format_bytes prints it: what is printed can be given back
}
_PRINT_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(size):
    """An int of bytes from an int or a string such as "12GiB", "512MiB", "1.5GB", "4096"."""
    if isinstance(size, float) and size.is_integer():  # 1e9, 2.0 * 2**30: whole bytes
        size = int(size)
    if isinstance(size, int) and not isinstance(size, bool):
        if size < 0:
            raise ValueError(f"a size in bytes cannot be negative: {size}")
        return size
    if isinstance(size, float):  # 1.5 bytes, nan, inf: no whole number of bytes
        raise ValueError(f"a size in bytes is a whole number, not {size}")
    match = _SIZE.match(str(size))
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _PARSE_UNITS:
        raise ValueError(
            f"cannot read {size!r} as a size: write a number of bytes (4096) or a number with "
            "a unit, e.g. 512MiB, 12GiB, 1.5GB (units: B, KB, MB, GB, TB, PB, KiB, MiB, GiB, "
            "TiB, PiB)"
        )
    return int(float(match.group(1)) * _PARSE_UNITS[unit])


def aligned_size(nbytes, alignment):
    """The bytes a block of `nbytes` takes in a pool: rounded up to a multiple of `alignment`,
    and at least one `alignment` (a zero-byte tensor still gets a block, an address of its
    own)."""
    return -(-max(nbytes, 1) // alignment) * alignment


def format_bytes(n: int) -> str:
    """Format a byte count for humans with binary units: 512 -> "512 B", 3670016 -> "3.5 MiB".

    Values below 1 KiB are printed exactly; larger ones with one decimal, so print
    the exact count alongside when it matters (as :class:`OutOfMemory` does).
    """
    n = int(n)
    sign = "-" if n < 0 else ""
    value = float(abs(n))
    if value < 1024:
        return f"{sign}{abs(n)} B"
    for unit in _PRINT_UNITS[1:]:
        value /= 1024.0
        # Switch to the next unit only once this one would print as >= 1024.0.
        if round(value, 1) < 1024 or unit == _PRINT_UNITS[-1]:
            return f"{sign}{value:.1f} {unit}"
    raise AssertionError("unreachable")
