"""The Unified Tensor Pool's LRU tensor cache (SuperNeurons, section 3.3 and Algorithm 2), for
eager mode: offloaded tensors stay on the device while memory allows.

Which tensors may leave the device (*candidates*): what an operator keeps for backward
(Operator.save) and the step itself made (activations; not parameters, optimizer state or
the input batch) -- under offload="all" every such tensor, under "conv" only a convolution's
input X (vDNN). Nothing moves while allocations succeed, so a model that fits moves zero bytes.
When an allocation cannot be served (the pool is full, or the budget is reached):

1. the least recently used candidate that is on the device and not *locked* (the tensors the
   current operation reads or writes are locked) is copied out to the host pool, on the copy
   stream, and more of them until their bytes would cover the request;
2. the allocation waits for the oldest pending copy-out (its event: a condition variable),
   frees that tensor's device bytes (unless the current operation locked the tensor after its
   copy began: it stays) and tries again;
3. only when nothing is pending and nothing can be evicted does it fail, with the usual
   OutOfMemory.

A tensor that is read again after it left (a *miss*: backward needs it) is copied back into
new device bytes first, which may evict others; a read of a candidate still on the device is a
*hit*, and makes it the most recently used. Counters per iteration (``memory_stats()``'s
``cache.*``): hits, misses, bytes each way, seconds the compute side waited.

The cache moves bytes, never changes them: losses are identical with the cache on or off.
"""

import time
from collections import OrderedDict

from nnmem.memory.errors import OutOfMemory

__all__ = ["TensorCache"]


class TensorCache:
    def __init__(self, device, policy):
        self.device = device
        self.policy = policy
        self.resident = OrderedDict()  # id(block) -> block: candidates on the device, LRU first
        self.pending = OrderedDict()  # id(block) -> (block, host block, event): copying out
        self.evicted = {}  # id(block) -> block: on the host only, until fetched or freed
        self.locked = {}  # id(block) -> how many current operations hold it
        self.born = set()  # ids of the blocks allocated during this step (Device.alloc_block)
        self.counters = {}
        self.new_iteration()

    def new_iteration(self):
        self.born.clear()
        self.counters = dict.fromkeys(
            ("cache.hits", "cache.misses", "cache.bytes_to_host", "cache.bytes_to_device"), 0
        )
        self.counters["cache.stall_seconds"] = 0.0

    # -- what operations tell the cache -----------------------------------------------------
    def consider(self, operator_name, blocks):
        """An operator kept `blocks` for backward: make them candidates under the policy."""
        if self.policy == "conv" and operator_name != "Conv2d":
            return
        for block in blocks:
            if id(block) in self.pending or id(block) in self.evicted:
                # a candidate this cache is moving out, or moved: it is resident again once
                # back (in `resident` meanwhile, it could be copied out twice, and leak)
                continue
            # made in this step (or not yet: an output saved before its kernel runs)
            if (id(block) in self.born or not block.allocated) and block.arena_offset is None:
                self.resident[id(block)] = block
                self.resident.move_to_end(id(block))

    def lock(self, blocks):
        for block in blocks:
            self.locked[id(block)] = self.locked.get(id(block), 0) + 1

    def unlock(self, blocks):
        for block in blocks:
            count = self.locked[id(block)] - 1
            if count:
                self.locked[id(block)] = count
            else:
                del self.locked[id(block)]

    def touch(self, block):
        """An access to `block`: a hit if it is a candidate still on the device."""
        key = id(block)
        if key in self.pending:  # leaving: let it stay (the copy only read it)
            self._settle(key, keep_on_device=True)
        if key in self.resident:
            self.resident.move_to_end(key)
            self.counters["cache.hits"] += 1

    def hold(self, block):
        """`block` is about to be used on the device (Block.ensure_allocated): if its copy-out
        is queued, it stays, and the host copy is dropped (a write after it would be lost)."""
        if id(block) in self.pending:
            self._settle(id(block), keep_on_device=True)

    def forget(self, block):
        """`block` is being freed: no copy of it is needed any more."""
        key = id(block)
        self.resident.pop(key, None)
        self.evicted.pop(key, None)
        self.born.discard(key)  # the id may be reused by a later block
        if block.host is not None:
            block.host.release()
            block.host = None

    # -- allocation and misses --------------------------------------------------------------
    def allocate(self, block):
        """The offset of new device bytes for `block`, evicting candidates until they fit;
        the pool's OutOfMemory (listing what is live now) when nothing more can move.

        No exception object is kept while trying: a caught error's traceback holds the frames
        of the operation that asked, and their tensors, until the garbage collector runs."""
        pool = self.device.pool
        while True:
            # at least one byte: with enough bytes free but not in one piece, evict anyway
            self._evict_for(max(block.nbytes - pool.stats()["free_bytes"], 1))
            if not self.pending:
                return pool.alloc(block.nbytes, owner=block)  # fits now, or the clear error
            # The oldest copy-out leaves, unless the running operation has locked its tensor
            # since it began: then it stays (evicting it would only fetch it back at once).
            key = next(iter(self.pending))
            self._settle(key, keep_on_device=key in self.locked)
            offset = try_alloc(pool, block)
            if offset is not None:
                return offset

    def fetch(self, block):
        """Copy an evicted `block` back to new device bytes (a miss) and wait for it."""
        block.inc_ref()  # alive until it is back, whatever the garbage collector frees
        try:
            self._fetch(block)
        finally:
            block.dec_ref()

    def bring_back(self):
        """Put every tensor this cache moved out back on the device, before the device drops
        the cache (every Model.compile replaces it): only a cache fetches what it evicted.
        The bytes come from the pool alone, evicting nothing; OutOfMemory if they do not fit
        (what came back stays, the rest stays evicted: the cache is still the device's)."""
        for key in list(self.pending):
            self._settle(key, keep_on_device=True)
        with self.device.bypassing_cache():  # allocate from the pool itself, not through this
            for block in list(self.evicted.values()):
                self.fetch(block)

    def _fetch(self, block):
        dev = self.device
        host = block.host
        block.host = None
        try:
            block.offset = dev.alloc_block(block)
        except BaseException:
            block.host = host
            raise
        label = f"fetch of {block} from the host"
        if dev.runs_kernels:  # a planning device counts the bytes; it has none to copy
            dev.queue_copy(_bytes(block), _bytes(host), dev.copy_stream, label)
        done = dev.create_event()
        done.record(dev.copy_stream)
        try:
            self._wait(done, label)
        except BaseException:  # the bytes on the device are garbage: the host copy stays
            dev.pool.free(block.offset)
            block.offset, block.host = None, host
            raise
        host.release()
        self.evicted.pop(id(block), None)
        self.resident[id(block)] = block
        self.counters["cache.misses"] += 1
        self.counters["cache.bytes_to_device"] += block.nbytes

    def _evict_for(self, shortfall):
        """Start copy-outs of least recently used, unlocked candidates until the bytes pending
        cover `shortfall`."""
        pending_bytes = sum(b.nbytes for b, _, _ in self.pending.values())
        for key in list(self.resident):
            if pending_bytes >= shortfall:
                return
            block = self.resident.get(key)  # None: freed meanwhile (the garbage collector)
            if block is None or key in self.locked or block.offset is None:
                continue  # gone, in use by the operation, or not allocated yet
            del self.resident[key]
            pending_bytes += block.nbytes
            self._copy_out(block)

    def _copy_out(self, block):
        # A pending block holds a reference: the garbage collector, which may run at any
        # allocation below, must not free it (and its host copy) while the copy is queued.
        block.inc_ref()
        dev = self.device
        host = dev.host.new_block(block.nbytes, f"{block} (evicted)")
        try:
            host.ensure_allocated()
        except BaseException:
            block.dec_ref()
            raise
        ready, done = dev.create_event(), dev.create_event()
        self.pending[id(block)] = (block, host, done)
        ready.record(dev.compute_stream)  # after the kernels that wrote it
        ready.wait(dev.copy_stream)
        if dev.runs_kernels:
            dev.queue_copy(_bytes(host), _bytes(block), dev.copy_stream, f"eviction of {block}")
        done.record(dev.copy_stream)

    def _settle(self, key, keep_on_device):
        """Wait for a pending copy-out; then either free the device bytes (the tensor now
        lives on the host) or drop the host copy (it stays, as the most recently used)."""
        block, host, done = self.pending.pop(key)
        try:
            self._wait(done, f"eviction of {block}")
        except BaseException:  # the host copy is garbage: the tensor stays on the device
            host.release()
            self.resident[key] = block
            block.dec_ref()
            raise
        if keep_on_device:
            host.release()
            self.resident[key] = block
        else:
            self.device.pool.free(block.offset)
            block.offset, block.host = None, host
            self.evicted[key] = block
            self.counters["cache.bytes_to_host"] += block.nbytes
        block.dec_ref()  # dead by now? then it is freed here, host copy and all

    def _wait(self, event, label):
        """Wait for a copy and raise its failure, if it failed (the copy stream keeps it)."""
        start = time.perf_counter()
        event.synchronize()
        self.device.raise_copy_failure(label)
        self.counters["cache.stall_seconds"] += time.perf_counter() - start

    def stats(self):
        return dict(self.counters)


def _bytes(block):
    return block.array((block.nbytes,), "uint8")


def try_alloc(pool, block):
    """The offset of `block`'s new bytes in `pool`, or None if it does not fit (the error is
    dropped at once: see TensorCache.allocate)."""
    try:
        return pool.alloc(block.nbytes, owner=block)
    except OutOfMemory:
        return None
