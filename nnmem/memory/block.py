"""Block: a lazily allocated, reference-counted handle to bytes in a device's pool.

Memory contract
- A Block is created with a size and no bytes (lazy allocation). It takes its bytes from the
  pool the first time an operation is about to write it (``ensure_allocated``).
- Every Tensor that refers to the block holds one reference (``inc_ref``). When the last
  reference goes (``dec_ref`` reaches 0) the device is told: normally the bytes go back to the
  pool at once, so the next request of a similar size can reuse them (memory sharing through
  the pool); with recycling switched off they go back only when the training step ends.
- A recorded graph does not hold references: it *lays out* the block instead, giving it a
  fixed offset inside the graph's arena (``arena_offset`` is then the arena's offset). Such a block
  is never freed on its own: the arena goes back to the pool as a whole.
- Reading a block that was never written is a bug in the caller (the bytes would be garbage):
  it raises instead of returning garbage.
- In eager mode with offloading, the device's tensor cache may move a block's bytes to host
  memory (``host`` is then that copy, and ``offset`` None) when memory runs short; any access
  (``ensure_allocated``, ``array``) brings them back first, and ``ensure_allocated`` keeps them
  on the device while their copy to the host is still queued (memory/cache.py).
"""

import math

import numpy as np


class UnwrittenBlockError(RuntimeError):
    """An operation read a tensor whose block was never written."""


class RecordingReadError(RuntimeError):
    """Python read a tensor of a step that is being recorded (its value does not exist yet)."""


class Block:
    __slots__ = (
        "device",
        "nbytes",
        "offset",
        "ref_count",
        "_desc",
        "arena_offset",
        "host",
        "_view",
        "__weakref__",
    )
    # arena_offset: None, or the offset of the graph arena block this block's bytes lie inside
    # host: None, or the host Block holding this block's bytes while it is evicted
    # _view: None, or (offset, shape, dtype, array): the last view array() made

    def __init__(self, device, nbytes, desc=""):
        self.device = device
        self.nbytes = int(nbytes)
        self.offset = None  # no bytes yet: allocated on first write
        self.ref_count = 0
        self._desc = desc
        self.arena_offset = None
        self.host = None
        self._view = None

    @property
    def desc(self):
        """Who made the block, for the out-of-memory report and the timeline: a string, made
        on first use where it was given as (label, shape, dtype) (an eager step makes hundreds
        of blocks, and formatting a NumPy dtype is slow enough to show in its profile)."""
        if isinstance(self._desc, tuple):
            label, shape, dtype = self._desc
            self._desc = f"{label} {tuple(shape)} {dtype}"
        return self._desc

    @desc.setter
    def desc(self, value):
        self._desc = value

    @property
    def allocated(self):
        """Has the block bytes (on the device, or evicted to the host)?"""
        return self.offset is not None or self.host is not None

    def ensure_allocated(self):
        """Give the block its bytes if it has none yet (the lazy allocation point), or bring
        them back from the host if the tensor cache evicted them. Bytes the cache is copying
        out stay on the device: a write may follow, which the host copy would miss."""
        if self.offset is None:
            if self.host is not None:
                self.device.cache.fetch(self)
            else:
                self.offset = self.device.alloc_block(self)
        elif getattr(self.device, "cache", None) is not None:
            self.device.cache.hold(self)

    def check_written(self):
        if self.host is not None:  # evicted: written, and on its way back when read
            return
        if self.offset is None and self.device.recorder is not None:
            raise RecordingReadError(
                f"{self} is computed by the training step that graph mode is recording right "
                "now: the step runs once the recording ends, so read it after model(...) "
                "returns (or call model.graph(False) to run eagerly)"
            )
        if self.offset is None:
            raise UnwrittenBlockError(
                f"read of {self} before anything wrote it; write it first "
                "(copy_from_numpy, set_value, gaussian, or an operation's output)"
            )

    def array(self, shape, dtype):
        """A view of the block's bytes as `shape` and `dtype` (no copy): a NumPy array on the
        CPU, a device array on a GPU (the device's storage makes it).

        A view is a function of the offset, shape and dtype alone, so a block outside the graph
        arena keeps its last one and gives it again while they stay the same: such a block
        with an offset is live (release() and the cache's eviction clear the offset), so the
        pool's check that the range is live holds for it. An eager step of ResNet-20 asks for
        ~1,200 views. A block in the arena is checked every time: the arena may be freed
        under it."""
        if self.offset is None:
            self.check_written()  # the clear error (unwritten, or being recorded)
            self.ensure_allocated()  # written: evicted, so fetch it back
        kept = self._view
        if (
            kept is not None
            and self.arena_offset is None
            and kept[:3] == (self.offset, shape, dtype)
        ):
            return kept[3]
        typed = np.dtype(dtype)
        raw = self.device.view(
            self.offset, math.prod(shape) * typed.itemsize, within=self.arena_offset
        )
        view = raw.view(typed).reshape(shape)
        self._view = (self.offset, shape, dtype, view)
        return view

    def inc_ref(self):
        self.ref_count += 1

    def dec_ref(self):
        self.ref_count -= 1
        if self.ref_count == 0:
            self.device.on_unreferenced(self)

    def release(self):
        """Return the bytes to the pool; the block may be written (and allocated) again later."""
        cache = getattr(self.device, "cache", None)
        if cache is not None:
            cache.forget(self)
        if self.offset is not None and self.arena_offset is None:
            self.device.pool.free(self.offset)
            self.offset = None

    def __str__(self):
        return self.desc or f"block of {self.nbytes} bytes"
