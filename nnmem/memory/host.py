"""Host memory for offloaded tensors: a second Pool, over host bytes, beside the device's.

An offloaded activation (vDNN, SuperNeurons' Unified Tensor Pool) spends the middle of the
step in host memory: copied out after forward produced it, copied back before backward reads
it. Its host copy is a Block in this pool, with the device pool's allocator and statistics
(``memory_stats()`` shows them as ``host.*``). The bytes come from the device (``make_storage``):
ordinary host memory on the CPU, page-locked ("pinned") memory on a GPU, which its copy engine
reads and writes without the CPU; a planning device has none (offsets only).

The storage is made on first use, so a device that never offloads reserves no host memory
(pinned memory is a scarce resource of the whole machine).
"""

from nnmem.memory.arena import SharedArena
from nnmem.memory.block import Block
from nnmem.memory.pool import ALIGNMENT, Pool


class HostMemory:
    """A host pool of `capacity` bytes; Blocks made by ``new_block`` live in it.

    It offers what a Block asks of its device (``pool``, ``view``, ``recorder``,
    ``on_unreferenced``), so host blocks are Blocks like any other."""

    is_host = True  # liveness plans host blocks apart from the device's (graph/liveness.py)
    recorder = None  # host blocks are made by the compiler, never recorded

    def __init__(self, capacity, make_storage, name):
        self.pool = Pool(capacity, alignment=ALIGNMENT)
        self.graph_arena = SharedArena(self.pool, place="place_host")  # compiled steps' copies
        self._make_storage = make_storage
        self._storage = None
        self.name = name

    cache = None  # host blocks are never evicted

    def new_block(self, nbytes, desc=""):
        return Block(self, nbytes, desc)

    def alloc_block(self, block):
        return self.pool.alloc(block.nbytes, owner=block)

    def view(self, offset, nbytes, within=None):
        self.pool.check_range(offset, nbytes, within)
        if self._storage is None:  # first use: reserve the bytes now
            self._storage = self._make_storage(self.pool.capacity, ALIGNMENT)
        return self._storage.view(offset, nbytes)

    def on_unreferenced(self, block):
        block.release()

    def stats(self):
        """The host pool's statistics, named ``host.<name>`` (see Pool.stats)."""
        return {f"host.{key}": value for key, value in self.pool.stats().items()}

    def __repr__(self):
        return f"<HostMemory of {self.name}>"
