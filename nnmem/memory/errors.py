"""Errors raised by nnmem's memory layer, and the byte formatter they use.

An out-of-memory error is the moment a learner most needs to *see* memory, so
:class:`OutOfMemory` carries everything needed to understand it: what was asked
for, what was left, how that leftover is shaped (one big hole or many small
ones), and who is holding the biggest blocks.
"""

from __future__ import annotations

from .units import format_bytes

__all__ = ["OutOfMemory", "TransferError"]


def _describe(owner: object) -> str:
    """str(owner) for an error message; never lets a broken __str__ hide the real error."""
    if owner is None:
        return "<owner unknown or already garbage-collected>"
    try:
        return str(owner)
    except Exception:  # noqa: BLE001 - we are already reporting a failure
        return f"<{type(owner).__name__} with a failing __str__>"


class OutOfMemory(MemoryError):
    """The pool cannot serve a request.

    Attributes (so tests and the framework can read them rather than parse text):

    request:            bytes the pool needed to find in one piece (the request
                        rounded up to the pool's alignment).
    nbytes:             bytes the caller asked for, before rounding.
    requester:          str(owner) of the request that failed (who asked), or None.
    free_bytes:         total free bytes in the pool, over all free segments.
    largest_free_block: the biggest single free segment; a request fits only if
                        it is <= this.
    capacity:           the pool's size in bytes.
    live:               the biggest live blocks, up to 10, as
                        (offset, size, description) sorted by size descending,
                        where description is str(owner). Strings, not the owners
                        themselves: an exception kept around (sys.last_value in
                        a REPL or notebook) must not keep tensors - and thereby
                        their pool blocks - alive.

    ``free_bytes >= request > largest_free_block`` means the pool is
    *fragmented*: there is enough memory in total, but not in one piece.
    Otherwise the pool must grow to at least ``capacity_lower_bound`` bytes
    (those in use plus this request; holes between live blocks and later
    requests may need more). The message says both (:meth:`report`), and how to
    fix it (:meth:`advice`); callers that know more add notes with ``add_note``,
    and the command line, which knows its flags, shows the report with advice
    of its own instead.
    """

    MAX_LISTED = 10

    def __init__(
        self,
        request: int,
        free_bytes: int,
        largest_free_block: int,
        capacity: int,
        live: list | None = None,
        nbytes: int | None = None,
        requester: object = None,
    ) -> None:
        self.request = int(request)
        self.nbytes = int(request if nbytes is None else nbytes)
        self.free_bytes = int(free_bytes)
        self.largest_free_block = int(largest_free_block)
        self.capacity = int(capacity)
        self.requester = (
            None
            if requester is None
            else (requester if isinstance(requester, str) else _describe(requester))
        )
        self.live = [
            (int(offset), int(size), owner if isinstance(owner, str) else _describe(owner))
            for offset, size, owner in list(live or [])[: self.MAX_LISTED]
        ]
        super().__init__(self._message())

    @property
    def fragmented(self) -> bool:
        """True when enough bytes are free in total, but no single free segment is big enough."""
        return self.free_bytes >= self.request > self.largest_free_block

    @property
    def capacity_lower_bound(self) -> int:
        """The bytes in use plus this request: no smaller pool could have served it."""
        return self.capacity - self.free_bytes + self.request

    def _message(self) -> str:
        return "\n".join(self.report() + self.advice())

    def report(self) -> list[str]:
        """What happened, as lines: the request, the pool's free memory, the biggest live blocks.

        The first lines of the message; :meth:`advice` follows them. The command line
        (``nnmem train``) prints this report under its own advice, given in its flags."""
        fb = format_bytes
        asked = f"{fb(self.request)} ({self.request} bytes"
        if self.nbytes != self.request:
            asked += f"; {self.nbytes} requested, rounded up to the pool's alignment"
        asked += ")"
        if self.requester:
            asked += f" for {self.requester}"
        lines = [
            f"Out of pool memory: tried to allocate {asked}.",
            f"  free: {fb(self.free_bytes)} ({self.free_bytes} bytes) of "
            f"{fb(self.capacity)} ({self.capacity} bytes) capacity; "
            f"largest free block: {fb(self.largest_free_block)} ({self.largest_free_block} bytes).",
        ]
        if self.live:
            lines.append(f"  biggest live blocks (up to {self.MAX_LISTED}):")
            for offset, size, description in self.live:
                lines.append(f"    {fb(size):>10} at offset {offset}: {description}")
        else:
            lines.append("  no live blocks: the request is larger than the whole pool.")
        return lines

    def advice(self) -> list[str]:
        """How to fix it, as lines, in Python's terms (a larger pool_bytes, a smaller batch, the
        memory viewer of the step): the end of the message, after :meth:`report`."""
        fb = format_bytes
        lines = ["How to fix it:"]
        if self.fragmented:
            lines.append(
                "  - the pool is fragmented: enough bytes are free in total but not in one piece; "
                "free long-lived blocks earlier, allocate them first, or use a larger pool;"
            )
            lines.append(
                "  - use a larger pool, e.g. device.create_cpu_device(pool_bytes=...) "
                f"with more than {fb(self.capacity)};"
            )
        else:
            needed = self.capacity_lower_bound
            lines.append(
                f"  - use a pool of at least {fb(needed)} ({needed} bytes: those in use plus "
                "this request; later requests may need more), e.g. "
                "device.create_cpu_device(pool_bytes=...);"
            )
        lines.append("  - or use a smaller batch size, so that activations need fewer bytes.")
        lines.append(
            "To see which tensors are live at the peak, and where the plan puts them, write the "
            "memory viewer and open it in a browser: nnmem plan --model M --batch B --input "
            "CxHxW --timeline oom.html (or, for a model of your own, nnmem.memory.viewer."
            "write_viewer with nnmem.planning.plan(model, input_shape, tensors=True))."
        )
        return lines

    def __reduce__(self):
        # Exceptions are pickled as type(self)(*self.args); our __init__ takes more
        # than the message, so say explicitly how to rebuild one (multiprocessing, pytest-xdist).
        return (
            type(self),
            (
                self.request,
                self.free_bytes,
                self.largest_free_block,
                self.capacity,
                self.live,
                self.nbytes,
                self.requester,
            ),
        )


class TransferError(RuntimeError):
    """A copy between device and host memory (offloading) failed; the step that needed it
    was undone (see Model.__call__)."""
