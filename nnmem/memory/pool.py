"""A preallocated memory pool: one big byte buffer carved up by a heap allocator.

This is the idea behind SuperNeurons' heap pool and PyTorch's caching allocator:
ask the operating system for memory *once*, then serve every tensor from that
buffer with cheap bookkeeping instead of a fresh malloc/free per tensor.

The memory contract
-------------------
* The buffer is ``capacity`` bytes, allocated up front; its base address is a
  multiple of ``alignment`` and so is every block's offset and size, so each
  block starts suitably aligned for any dtype (and for SIMD loads).
* A block is identified by its byte offset in the buffer. ``alloc`` returns it,
  ``free`` takes it back, ``check_range`` says whether a byte range lies inside it.
* The pool never touches the bytes: a storage object owns them and makes views
  (memory/storage.py), so one allocator serves host memory, GPU memory and planning.
* The buffer is always partitioned exactly into live blocks and free segments;
  two free segments are never adjacent (``free`` coalesces them at once).
* The pool keeps only a weak reference to a block's owner where it can, so
  the pool never keeps a tensor alive; the owner frees its block.
* Safe under threads: every public method holds the pool's lock, so two threads that
  allocate and free at once never see (or leave) a half-updated free list.
"""

from __future__ import annotations

import bisect
import functools
import operator
import threading
import weakref

from .errors import OutOfMemory
from .units import aligned_size

__all__ = ["ALIGNMENT", "FIT_POLICIES", "Pool", "first_fit"]

ALIGNMENT = 256  # bytes; like cudaMalloc's guarantee. Every block offset and size is a multiple.
FIT_POLICIES = ("best_fit", "first_fit")  # which free segment a request is carved from


def first_fit(free_offsets, free_size, size):
    """The offset of the lowest-addressed free segment of at least `size` bytes, or None.

    first_fit = min {o in free_offsets : free_size[o] >= size}   (None if the set is empty)

    `free_offsets` lists the free segments' offsets in ascending order, `free_size` maps each
    to its length in bytes. A segment of exactly `size` bytes fits. The segment's length does
    not matter beyond fitting: a larger segment at a lower address wins over a snug one higher
    up (that is best fit's choice). Walking the segments by address and stopping at the first
    that fits costs O(position of the answer); the pool then splits the segment, and the block
    takes its low end.
    """
    for offset in free_offsets:
        if free_size[offset] >= size:
            return offset
    return None


def _locked(method):
    """Run `method` holding the pool's lock (reentrant: locked methods call each other)."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class Pool:
    """A preallocated byte buffer with a heap allocator: split on alloc, coalesce on free.

    ``policy`` (a fit policy) picks the free segment a request is carved from:

    * ``"best_fit"``: the smallest free segment that fits (ties: lowest offset).
      It leaves big segments whole for big requests.
    * ``"first_fit"``: the lowest-offset free segment that fits. Simpler, and it
      packs blocks towards the start of the buffer.

    ``capacity`` is rounded down to a multiple of ``alignment``.
    """

    def __init__(
        self,
        capacity: int,
        policy: str = "best_fit",
        alignment: int = ALIGNMENT,
    ) -> None:
        alignment = operator.index(alignment)
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(
                f"Pool alignment must be a positive power of two, got {alignment}; "
                f"use e.g. {ALIGNMENT}."
            )
        capacity = operator.index(capacity)
        if capacity < alignment:
            raise ValueError(
                f"Pool capacity {capacity} bytes is smaller than the alignment "
                f"({alignment} bytes), so not even one block fits; "
                f"pass a capacity of at least {alignment} bytes "
                f"(in practice many MiB, e.g. pool_bytes=256 * 2**20)."
            )
        if policy not in FIT_POLICIES:
            raise ValueError(
                f"Unknown pool policy {policy!r}; use one of {', '.join(map(repr, FIT_POLICIES))}."
            )
        self._lock = threading.RLock()
        self.alignment = alignment
        self.capacity = capacity - capacity % alignment
        self.policy = policy

        # The id-to-block table: offset -> (size, requested bytes, owner, owner_is_weakref).
        self._live: dict[int, tuple[int, int, object, bool]] = {}
        # Free segments, indexed two ways so both policies and coalescing are cheap:
        self._free_size: dict[int, int] = {}  # offset -> size
        self._free_offsets: list[int] = []  # sorted offsets: first fit, and neighbours on free
        self._free_by_size: list[tuple[int, int]] = []  # sorted (size, offset): best fit by bisect
        self._add_free(0, self.capacity)

        self._allocated = 0  # sum of live (rounded) sizes
        self._requested = 0  # sum of live unrounded requests; the gap is alignment padding
        self._peak = 0
        self._high_water = 0  # end of the highest block allocated since the last reset
        self._num_allocs = 0
        self._num_frees = 0
        # At most this many bytes allocated at once (None: the capacity). A budget set by
        # Model.compile(budget=...): the pool behaves as if it were this large.
        self.budget: int | None = None

    # -- free-segment index ---------------------------------------------------
    # Each operation is a bisect plus a list insert/delete (a memmove of pointers):
    # O(log n) comparisons, O(n) at C speed; nothing rebuilds from the live blocks.

    def _add_free(self, offset: int, size: int) -> None:
        self._free_size[offset] = size
        bisect.insort(self._free_offsets, offset)
        bisect.insort(self._free_by_size, (size, offset))

    def _remove_free(self, offset: int) -> int:
        size = self._free_size.pop(offset)
        del self._free_offsets[bisect.bisect_left(self._free_offsets, offset)]
        del self._free_by_size[bisect.bisect_left(self._free_by_size, (size, offset))]
        return size

    def _find_free(self, size: int) -> int | None:
        """Offset of the free segment to carve `size` bytes from, or None if none fits."""
        if self.policy == "best_fit":
            # (size, -1) sorts before every (size, offset): the first entry at or after
            # it is the smallest segment >= size, lowest offset among equal sizes.
            i = bisect.bisect_left(self._free_by_size, (size, -1))
            return self._free_by_size[i][1] if i < len(self._free_by_size) else None
        return first_fit(self._free_offsets, self._free_size, size)

    # -- allocation -----------------------------------------------------------

    @_locked
    def alloc(self, nbytes: int, owner: object = None) -> int:
        """Reserve ``round_up(max(nbytes, 1), alignment)`` bytes; return the block's offset.

        ``owner`` describes who holds the block (``str(owner)`` appears in
        out-of-memory reports). The pool keeps a weak reference to it when the
        object supports one, else the object itself (e.g. a ``str``).

        Raises :class:`OutOfMemory` when no free segment is large enough. A zero-byte
        request still gets a block of its own, so every live tensor has a distinct id.
        """
        nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"Pool.alloc: cannot allocate a negative number of bytes ({nbytes}).")
        size = aligned_size(nbytes, self.alignment)
        if self.budget is not None and self._allocated + size > self.budget:
            # built by a method: a local holding the error would be a cycle through its
            # traceback, keeping the caller's frames (and tensors) until the collector runs
            raise self._over_budget(size, nbytes, owner)
        offset = self._find_free(size)
        if offset is None:
            raise OutOfMemory(
                request=size,
                nbytes=nbytes,
                free_bytes=self.capacity - self._allocated,
                largest_free_block=self._largest_free(),
                capacity=self.capacity,
                live=self.live_blocks()[: OutOfMemory.MAX_LISTED],
                requester=owner,
            )
        # Split: the block takes the low end of the segment, the remainder stays free.
        segment = self._remove_free(offset)
        if segment > size:
            self._add_free(offset + size, segment - size)

        try:
            ref, weak = weakref.ref(owner), True
        except TypeError:  # None, str, int, tuple... cannot be weakly referenced
            ref, weak = owner, False
        self._live[offset] = (size, nbytes, ref, weak)

        self._allocated += size
        self._requested += nbytes
        self._peak = max(self._peak, self._allocated)
        self._high_water = max(self._high_water, offset + size)
        self._num_allocs += 1
        return offset

    def _over_budget(self, size: int, nbytes: int, owner: object) -> OutOfMemory:
        error = OutOfMemory(
            request=size,
            nbytes=nbytes,
            free_bytes=self._budget_left(),
            largest_free_block=self._largest_within_budget(),
            capacity=self.budget,
            live=self.live_blocks()[: OutOfMemory.MAX_LISTED],
            requester=owner,
        )
        error.add_note(
            f"the pool holds {self.capacity} bytes, but a budget of {self.budget} bytes is "
            "set (compile(..., budget=...)): raise the budget, or let the step keep less "
            "on the device (compile(..., offload='all', recompute='cost-aware'))"
        )
        return error

    @_locked
    def free(self, offset: int) -> None:
        """Return the block at ``offset`` to the pool, merging it with free neighbours.

        Afterwards no two free segments are adjacent, so the largest free block is
        as large as the layout allows. An offset that is not a live block (never
        allocated, not a block start, or already freed) raises ValueError.
        """
        offset = operator.index(offset)
        entry = self._live.pop(offset, None)
        if entry is None:
            raise ValueError(self._bad_offset("free", offset))
        size, nbytes = entry[0], entry[1]
        self._allocated -= size
        self._requested -= nbytes
        self._num_frees += 1

        start, end = offset, offset + size
        # Right neighbour: a free segment starting exactly where this block ends.
        if end in self._free_size:
            end += self._remove_free(end)
        # Left neighbour: the free segment just below this offset, if it ends here.
        i = bisect.bisect_left(self._free_offsets, offset)
        if i > 0:
            left = self._free_offsets[i - 1]
            if left + self._free_size[left] == offset:
                self._remove_free(left)
                start = left
        self._add_free(start, end - start)

    def _bad_offset(self, op: str, offset: int) -> str:
        """Why `offset` is not a live block (for the ValueError of free/check_range/size_of)."""
        msg = f"Pool.{op}: offset {offset} is not a live block"
        i = bisect.bisect_right(self._free_offsets, offset) - 1
        if i >= 0:
            seg = self._free_offsets[i]
            if seg <= offset < seg + self._free_size[seg]:
                return (
                    msg + f" (bytes [{seg}, {seg + self._free_size[seg]}) are free: "
                    "a double free, or a stale offset?)."
                )
        if not 0 <= offset < self.capacity:
            return msg + f" (outside the buffer [0, {self.capacity}))."
        return (
            msg
            + " (it points inside a block but not at its start; pass the offset alloc() returned)."
        )

    # -- access ---------------------------------------------------------------

    @_locked
    def size_of(self, offset: int) -> int:
        """The (rounded) size in bytes of the live block at ``offset``."""
        entry = self._live.get(offset)
        if entry is None:
            raise ValueError(self._bad_offset("size_of", offset))
        return entry[0]

    @_locked
    def check_range(self, offset: int, nbytes: int, within: int | None = None) -> None:
        """Raise ValueError unless bytes [offset, offset + nbytes) lie inside the live block at
        ``offset`` (or, given ``within``, inside the live block at ``within``: a graph's planned
        tensors live inside its one arena block, at offsets of their own).

        The device checks this before its storage makes a view. A view stays valid memory after
        ``free``, but the bytes may then belong to another block: use-after-free is the owner's
        bug, exactly as with a raw pointer.
        """
        start = offset if within is None else within
        size = self.size_of(start)
        if not (0 <= nbytes and start <= offset and offset + nbytes <= start + size):
            raise ValueError(
                f"Pool.check_range: bytes [{offset}, {offset + nbytes}) do not fit the "
                f"{size}-byte block at offset {start}."
            )

    # -- statistics -----------------------------------------------------------

    def _largest_free(self) -> int:
        return self._free_by_size[-1][0] if self._free_by_size else 0

    def _budget_left(self) -> int:
        """Bytes that may still be allocated: free bytes, or what the budget leaves."""
        free = self.capacity - self._allocated
        return free if self.budget is None else max(min(free, self.budget - self._allocated), 0)

    @_locked
    def largest_free_block(self) -> int:
        """stats()["largest_free_block"] alone, for a caller that asks at every operation
        (Conv2d's "auto" workspace), without making every other counter."""
        return self._largest_within_budget()

    def _largest_within_budget(self) -> int:
        return min(self._largest_free(), self._budget_left())

    @_locked
    def stats(self) -> dict:
        """Counters named like ``torch.cuda.memory_stats()``.

        allocated_bytes.*  rounded sizes of live blocks (what the buffer gives up)
        high_water_bytes   end of the highest block allocated since the last reset: the smallest
                           pool this run needed, fragmentation included (what a pool that grows
                           on demand, like SINGA's CnMem, would have reserved)
        requested_bytes.current  what callers asked for; the gap is alignment padding
        reserved_bytes     the buffer's capacity (the pool holds it all, used or not)
        budget_bytes       the budget (None: none); free_bytes and largest_free_block then count
                           only what the budget leaves, so callers that size their requests
                           to free memory (Conv2d's "auto" workspace) stay within it
        largest_free_block / free_segments  how fragmented the free space is
        """
        return {
            "allocated_bytes.current": self._allocated,
            "allocated_bytes.peak": self._peak,
            "high_water_bytes": self._high_water,
            "requested_bytes.current": self._requested,
            "reserved_bytes": self.capacity,
            "budget_bytes": self.budget,
            "free_bytes": self._budget_left(),
            "largest_free_block": self._largest_within_budget(),
            "num_allocs": self._num_allocs,
            "num_frees": self._num_frees,
            "active_blocks": len(self._live),
            "free_segments": len(self._free_offsets),
        }

    @_locked
    def reset_peak(self) -> None:
        """Start a new peak measurement: allocated_bytes.peak = allocated_bytes.current, and the
        high-water mark = the end of the highest live block."""
        self._peak = self._allocated
        self._high_water = max((off + entry[0] for off, entry in self._live.items()), default=0)

    @_locked
    def segments(self) -> list[tuple[int, int, bool]]:
        """The buffer's layout as (offset, size, is_free), sorted by offset,
        covering [0, capacity)."""
        out = [(off, entry[0], False) for off, entry in self._live.items()]
        out += [(off, size, True) for off, size in self._free_size.items()]
        out.sort()
        return out

    @_locked
    def live_blocks(self) -> list[tuple[int, int, object]]:
        """Live blocks as (offset, size, owner), largest first (ties: lowest offset).

        ``owner`` is None when it was None, or when its weak reference has died.
        """
        out = []
        # a copy: a weak reference resolved here may let the garbage collector run, and a
        # collected owner frees its block (this thread holds the lock: it may)
        for off, (size, _nbytes, ref, weak) in self._live.copy().items():
            out.append((off, size, ref() if weak else ref))
        out.sort(key=lambda b: (-b[1], b[0]))
        return out

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"Pool(capacity={self.capacity}, policy={self.policy!r}, "
            f"allocated={s['allocated_bytes.current']}, active_blocks={s['active_blocks']}, "
            f"free_segments={s['free_segments']})"
        )
