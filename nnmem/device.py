"""Devices: each owns one preallocated memory pool and runs (or, later, records) operations.

SINGA's contract, kept here: every operation hands the device a function together with the
blocks it reads and the blocks it writes, ``dev.exec(fn, reads, writes)``. Knowing the blocks is
what lets the device allocate lazily (a written block gets its bytes just before its first
writer runs) and, in graph mode, order, recycle and plan memory for a recorded step.
"""
import os

import numpy as np

from nnmem.memory.block import Block
from nnmem.memory.pool import Pool
from nnmem.memory.units import format_bytes, parse_bytes

DEFAULT_POOL_BYTES = "2GiB"


class DeviceUnavailable(RuntimeError):
    """The requested kind of device cannot be created on this machine."""


class Device:
    """A device: a memory pool, a random generator, and ``exec``.

    ``dry_run`` (used by ``Model.compile``) runs no kernel and allocates nothing: shapes flow
    through the layers so that they can create their parameters, as SINGA's compile does by
    buffering one forward pass and then discarding it.
    """

    lang = "cpp"

    def __init__(self, pool_bytes=None, strategy="best_fit", name="cpu", dev_id=-1):
        if pool_bytes is None:
            pool_bytes = os.environ.get("NNMEM_POOL_BYTES", DEFAULT_POOL_BYTES)
        self.pool = Pool(parse_bytes(pool_bytes), strategy=strategy)
        self.name = name
        self.dev_id = dev_id
        self.rng = np.random.default_rng()
        self.dry_run = False

    # -- memory ---------------------------------------------------------------------------
    def new_block(self, nbytes, desc=""):
        """A lazily allocated block of `nbytes` in this device's pool."""
        return Block(self.pool, nbytes, desc)

    def memory_stats(self):
        """The pool's statistics (names as in torch.cuda.memory_stats)."""
        return self.pool.stats()

    def reset_peak_memory_stats(self):
        self.pool.reset_peak()

    # -- execution ------------------------------------------------------------------------
    def exec(self, fn, reads, writes):
        """Run `fn()`, which reads the blocks `reads` and writes the blocks `writes`.

        Written blocks are allocated here, just before their first writer (lazy allocation);
        a read of a block nobody wrote raises instead of returning garbage.
        """
        if self.dry_run:
            return
        for block in reads:
            block.check_written()
        for block in writes:
            block.ensure_allocated()
        fn()

    # -- SINGA's device methods -------------------------------------------------------------
    def SetRandSeed(self, seed):
        """Seed the generator that initialises parameters and draws dropout masks."""
        self.rng = np.random.default_rng(seed)

    def Sync(self):
        """Wait for queued work; the CPU device runs everything at once, so nothing waits."""

    def id(self):
        return self.dev_id

    def __repr__(self):
        return f"<Device {self.name} pool={format_bytes(self.pool.capacity)}>"


_default_device = None


def create_cpu_device(pool_bytes=None, strategy="best_fit"):
    """A CPU device whose pool preallocates `pool_bytes` (int or "2GiB"; default 2 GiB, or
    the environment variable NNMEM_POOL_BYTES). `strategy` is "best_fit" or "first_fit"."""
    return Device(pool_bytes, strategy=strategy)


def get_default_device():
    """The process-wide default CPU device (created on first use)."""
    global _default_device
    if _default_device is None:
        _default_device = create_cpu_device()
    return _default_device


def create_cuda_gpu(*args, **kwargs):
    """CUDA devices come in a later version of nnmem."""
    raise DeviceUnavailable(
        "create_cuda_gpu(): this version of nnmem has no CUDA device yet; "
        "use device.create_cpu_device() (the same model code runs on it unchanged)")


def create_cuda_gpu_on(*args, **kwargs):
    return create_cuda_gpu()
