"""The Unified Tensor Pool's LRU tensor cache (SuperNeurons, section 3.3 and Algorithm 2), for
eager mode: offloaded tensors stay on the device while memory allows.

Which tensors may leave the device (*candidates*): what an operator keeps for backward
(Operator.save) -- under offload="all" every such tensor, under "conv" only a convolution's
input X (vDNN). Nothing moves while allocations succeed, so a model that fits moves zero bytes.
When an allocation cannot be served (the pool is full, or the budget is reached):

1. the least recently used candidate that is on the device and not *locked* (the tensors the
   current operation reads or writes are locked) is copied out to the host pool, on the copy
   stream, and more of them until their bytes would cover the request;
2. the allocation waits for the oldest pending copy-out (its event: a condition variable),
   frees that tensor's device bytes and tries again;
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
        self.locked = {}  # id(block) -> how many current operations hold it
        self.counters = {}
        self.new_iteration()

    def new_iteration(self):
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
            if block.device is self.device and block.offset is not None and block.arena is None:
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

    def forget(self, block):
        """`block` is being freed: no copy of it is needed any more."""
        key = id(block)
        if key in self.pending:
            self._settle(key, keep_on_device=True)
        self.resident.pop(key, None)
        if block.host is not None:
            block.host.release()
            block.host = None

    # -- allocation and misses --------------------------------------------------------------
    def allocate(self, block, error):
        """The offset of new device bytes for `block`, evicting candidates until they fit;
        `error` is the OutOfMemory the first attempt raised (raised again if nothing helps)."""
        pool = self.device.pool
        while True:
            # at least one byte: with enough bytes free but not in one piece, evict anyway
            self._evict_for(max(block.nbytes - pool.stats()["free_bytes"], 1))
            if not self.pending:
                raise error
            self._settle(next(iter(self.pending)), keep_on_device=False)
            try:
                return pool.alloc(block.nbytes, owner=block)
            except OutOfMemory as again:
                error = again

    def fetch(self, block):
        """Copy an evicted `block` back to new device bytes (a miss) and wait for it."""
        dev = self.device
        host = block.host
        block.host = None
        try:
            block.offset = dev.alloc_block(block)
        except BaseException:
            block.host = host
            raise
        dev.queue_copy(
            block.array((block.nbytes,), "uint8"),
            _bytes(host),
            dev.copy_stream,
            f"fetch of {block} from the host",
        )
        done = dev.create_event()
        done.record(dev.copy_stream)
        self._wait(done)
        host.release()
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
            if key in self.locked:
                continue
            block = self.resident.pop(key)
            pending_bytes += block.nbytes
            self._copy_out(block)

    def _copy_out(self, block):
        dev = self.device
        host = dev.host.new_block(block.nbytes, f"{block} (evicted)")
        host.ensure_allocated()
        ready, done = dev.create_event(), dev.create_event()
        ready.record(dev.compute_stream)  # after the kernels that wrote it
        ready.wait(dev.copy_stream)
        dev.queue_copy(
            _bytes(host),
            block.array((block.nbytes,), "uint8"),
            dev.copy_stream,
            f"eviction of {block} to the host",
        )
        done.record(dev.copy_stream)
        self.pending[id(block)] = (block, host, done)

    def _settle(self, key, keep_on_device):
        """Wait for a pending copy-out; then either free the device bytes (the tensor now
        lives on the host) or drop the host copy (it stays, as the most recently used)."""
        block, host, done = self.pending.pop(key)
        self._wait(done)
        if keep_on_device:
            host.release()
            self.resident[key] = block
            return
        self.device.pool.free(block.offset)
        block.offset, block.host = None, host
        self.counters["cache.bytes_to_host"] += block.nbytes

    def _wait(self, event):
        """Wait for a copy and raise its failure, if it failed (the copy stream keeps it)."""
        start = time.perf_counter()
        event.synchronize()
        self.device.raise_copy_failure()
        self.counters["cache.stall_seconds"] += time.perf_counter() - start

    def stats(self):
        return dict(self.counters)


def _bytes(block):
    return block.array((block.nbytes,), "uint8")
