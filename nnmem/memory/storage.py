"""Storage: the bytes behind a pool, apart from the pool's bookkeeping.

A Pool (pool.py) only hands out offsets: which bytes of a buffer of `capacity` bytes belong to
which block. It never touches the bytes, so the same allocator, with the same statistics and
property tests, serves every kind of device. A storage object owns the bytes and turns a byte
range into an array:

* ``HostStorage``: one NumPy buffer in host memory (the CPU device);
* ``NoStorage``: no bytes at all (the planning device: a plan needs offsets, not bytes);
* the CUDA device's storage is one device array (nnmem.devices.cuda), for the same reason a
  caching allocator exists: cudaMalloc and cudaFree synchronise the whole GPU.

The contract: ``view(offset, nbytes)`` returns a uint8 array of exactly `nbytes` bytes starting
at `offset` (no copy; writing it writes the storage), and ``address`` is a multiple of the
alignment, so every block, whose offset is one too, starts aligned for any dtype.
"""

import numpy as np

__all__ = ["HostStorage", "NoStorage"]


class HostStorage:
    """`capacity` bytes of host memory, aligned to `alignment`."""

    def __init__(self, capacity, alignment):
        # Over-allocate by one alignment and slice so the buffer's *address* is aligned, not
        # only its offsets. np.empty only reserves address space: the OS maps a page on first
        # write, so an idle buffer costs (almost) no resident memory.
        raw = np.empty(capacity + alignment, dtype=np.uint8)
        skip = -raw.ctypes.data % alignment
        self.buffer = raw[skip : skip + capacity]  # a view; it keeps `raw` alive
        self.capacity = capacity

    @property
    def address(self):
        return self.buffer.ctypes.data

    def view(self, offset, nbytes):
        return self.buffer[offset : offset + nbytes]


class NoStorage:
    """No bytes: a planning pool's offsets have nothing behind them."""

    address = 0

    def __init__(self, capacity, alignment=None):
        self.capacity = capacity

    def view(self, offset, nbytes):
        raise ValueError(
            "a planning device has no bytes to view: it plans memory on shapes alone; "
            "run the model on device.create_cpu_device() to see values"
        )
