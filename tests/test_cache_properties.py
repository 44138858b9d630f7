"""Property tests for eager offloading's tensor cache (nnmem/memory/cache.py): random tensors,
host writes and reads, operations and frees on a small CPU device, against a model.

The cache's contract, as its module docstring states it:
  * it moves bytes and never changes them: every tensor reads back bit-identical, on the device,
    from its host copy, and after it comes back;
  * nothing moves while allocations succeed: an allocation that fits evicts nothing;
  * only candidates leave the device (tensors kept for backward that the step itself made; under
    offload="conv" only a convolution's), least recently used first, and never one that the
    running operation reads or writes (locked);
  * an allocation fails (OutOfMemory) only when nothing more can move;
  * the pool never holds more than the budget; the host pool holds exactly the copies;
  * its counters (hits, misses, bytes each way) count what happened in this step;
  * a cache that is replaced brings every tensor it moved out back first.

The test sees each move the cache decides through a subclass that reports the start of every
copy-out and the end of every pending one (`watched`); everything else it checks from outside.
tests/test_property_mutants.py checks that these tests catch a broken cache.
"""

import contextlib
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from property_counts import count

from nnmem import device, tensor
from nnmem.memory.cache import TensorCache
from nnmem.memory.errors import OutOfMemory
from nnmem.memory.pool import ALIGNMENT
from nnmem.memory.units import aligned_size

pytestmark = pytest.mark.properties

A = ALIGNMENT
UNKNOWN = "unknown"  # a tensor's value after an operation that failed before its kernel ran


def watched(cache_class, machine):
    """`cache_class` reporting each move to `machine` as the cache decides it."""

    class Watched(cache_class):
        def _copy_out(self, block):
            machine.copy_out_starts(block)
            super()._copy_out(block)

        def _settle(self, key, keep_on_device):
            block = self.pending[key][0]
            machine.copy_out_ends(block, keep_on_device)
            super()._settle(key, keep_on_device)
            machine.copy_out_ended(block, keep_on_device)

    return Watched


class CacheMachine(RuleBasedStateMachine):
    """A small CPU device with the cache on (under a budget, or none), during a step; the model
    knows every tensor's value, whether it is a candidate, and when each was last used."""

    cache_class = TensorCache  # under test (the mutation tests swap in broken copies)

    @initialize(
        capacity=st.integers(4, 12).map(lambda k: k * 1024),
        policy=st.sampled_from(["all", "conv"]),
        budget=st.none() | st.integers(50, 95),
    )
    def setup(self, capacity, policy, budget):
        self.dev = device.create_cpu_device(capacity)
        self.policy = policy
        self.budget = None if budget is None else self.dev.pool.capacity * budget // 100
        self.cache = watched(self.cache_class, self)(self.dev, policy)
        self.dev.set_memory_budget(self.budget, self.cache)
        self.step = contextlib.ExitStack()
        self.step.enter_context(self.dev.step())  # the tensors are made during a step
        self.tensors = {}  # name -> Tensor
        self.values = {}  # name -> its value: an array, None (never written), or UNKNOWN
        self.name_of = {}  # id(block) -> name
        self.candidates = {}  # name -> when last used (the model's LRU clock)
        self.born = set()  # names of tensors allocated in this step (under this cache)
        self.pending = []  # names whose copy-out has started, in order
        self.orphans = {}  # name -> block: freed while its copy-out is queued (the copy holds it)
        self.in_operation = set()  # names the running operation reads or writes: locked
        self.lru_known = True  # False once a failed cache swap left the order unknown
        self.clock = 0
        self.copy_outs = 0
        self.counters = dict.fromkeys(
            ("cache.hits", "cache.misses", "cache.bytes_to_host", "cache.bytes_to_device"), 0
        )
        self.tag = 0

    def teardown(self):
        """Free everything: both pools must end empty (a freed tensor's host copy goes too)."""
        if not hasattr(self, "dev") or sys.exc_info()[0] is not None:
            return  # Hypothesis calls this in a `finally`: after a failure, the state is broken
        self.tensors.clear()
        self.step.close()
        self.dev.set_memory_budget(None, None)  # brings back what is pending, drops the cache
        stats = self.dev.memory_stats()
        assert stats["allocated_bytes.current"] == 0, "device bytes left after every free"
        assert stats["host.allocated_bytes.current"] == 0, "host copies left after every free"

    # -- the model's bookkeeping ----------------------------------------------------------------

    def op(self):
        count("tensor cache operations")

    def use(self, name):
        """`name` was used: the most recently used, if it is a candidate."""
        if name in self.candidates:
            self.clock += 1
            self.candidates[name] = self.clock

    def on_device(self, name):
        return self.tensors[name].block.offset is not None

    def evicted(self, name):
        return self.tensors[name].block.host is not None

    def movable(self, but=None):
        """Candidates the cache may still copy out: on the device, not leaving, not locked."""
        return [
            n
            for n in self.candidates
            if n != but
            and n not in self.in_operation
            and n not in self.pending
            and self.on_device(n)
        ]

    def copy_out_starts(self, block):
        name = self.name_of.get(id(block))
        assert name is not None, "the cache moved a block that is no tensor's"
        assert name in self.candidates, f"{name} left the device but is no candidate"
        assert name not in self.in_operation, f"{name} left while an operation holds it"
        others = self.movable(but=name)
        if self.lru_known and others:
            lru = min(others, key=self.candidates.get)
            assert self.candidates[name] < self.candidates[lru], (
                f"{name} left before {lru}, which was used less recently"
            )
        self.pending.append(name)
        self.copy_outs += 1

    def copy_out_ends(self, block, keep_on_device):
        name = self.name_of[id(block)]
        if not keep_on_device:
            assert name not in self.in_operation, f"{name} evicted while an operation holds it"
            event("a tensor evicted")
        self.pending.remove(name)
        if keep_on_device:
            self.use(name)  # it stays, as the most recently used

    def copy_out_ended(self, block, keep_on_device):
        name = self.name_of[id(block)]
        if not keep_on_device:
            self.counters["cache.bytes_to_host"] += block.nbytes
        if name in self.orphans:  # nothing holds it any more: gone, host copy and all
            del self.orphans[name], self.name_of[id(block)]
            assert block.offset is None and block.host is None, f"freed {name} outlived its copy"
        elif not keep_on_device:
            assert block.offset is None and block.host is not None, f"{name} evicted, not moved"

    def check_nothing_could_move(self):
        """After an OutOfMemory: every candidate that could have moved has moved."""
        left = self.movable()
        assert not left, f"out of memory with {left} still movable"
        event("out of memory, nothing left to move")

    def fetched(self, name):
        """An evicted tensor came back: a miss, and the most recently used."""
        self.counters["cache.misses"] += 1
        self.counters["cache.bytes_to_device"] += self.tensors[name].block.nbytes
        self.use(name)
        self.born.add(name)

    # -- rules ----------------------------------------------------------------------------------

    def value(self, n, seed):
        return (np.arange(n, dtype=np.float32) + np.float32(seed)) * np.float32(0.5)

    @precondition(
        lambda self: (
            sum(aligned_size(t.block.nbytes, A) for t in self.tensors.values())
            < 3 * self.dev.pool.capacity
        )  # the host pool (4 device pools) holds every copy
    )
    @rule(
        n=st.integers(1, 16).map(lambda k: 64 * k) | st.integers(1, 100),
        write=st.booleans(),
        saved_by=st.sampled_from([None, "Conv2d", "Dense"]),
    )
    def make(self, n, write, saved_by):
        """A new tensor of `n` floats: written from the host now, or left for an operation;
        then saved for backward by an operator, or not."""
        self.make_tensor(n, write)
        if saved_by is not None:
            self.keep_tensor(f"t{self.tag - 1}", saved_by)

    def make_tensor(self, n, write):
        name = f"t{self.tag}"
        self.tag += 1
        t = tensor.Tensor((n,), self.dev, requires_grad=False)
        self.tensors[name], self.values[name] = t, None
        self.name_of[id(t.block)] = name
        if not write:
            return
        fits = self.dev.pool.stats()["largest_free_block"] >= aligned_size(4 * n, A)
        moved = self.copy_outs
        self.op()
        try:
            t.copy_from_numpy(self.value(n, self.tag))
        except OutOfMemory:
            self.check_nothing_could_move()
            return
        assert not fits or self.copy_outs == moved, "an allocation that fitted evicted"
        self.values[name] = self.value(n, self.tag)
        self.born.add(name)

    def written(self):
        return sorted(n for n, v in self.values.items() if v is not None and v is not UNKNOWN)

    @precondition(lambda self: self.written())
    @rule(data=st.data())
    def overwrite(self, data):
        self.overwrite_tensor(data.draw(st.sampled_from(self.written()), label="tensor"))

    @precondition(lambda self: set(self.pending) & set(self.written()))
    @rule(data=st.data())
    def overwrite_while_leaving(self, data):
        """A host write to a tensor whose copy-out is queued (rare otherwise: an allocation
        leaves copies queued only when fewer bytes than it started copying sufficed)."""
        leaving = sorted(set(self.pending) & set(self.written()))
        self.overwrite_tensor(data.draw(st.sampled_from(leaving), label="tensor"))

    def overwrite_tensor(self, name):
        t = self.tensors[name]
        was_evicted = self.evicted(name)
        self.op()
        try:
            t.copy_from_numpy(self.value(t.size(), self.tag))
        except OutOfMemory:
            self.check_nothing_could_move()
            return
        if was_evicted:  # brought back, then written
            self.fetched(name)
        self.values[name] = self.value(t.size(), self.tag)
        self.tag += 1

    @precondition(lambda self: self.written())
    @rule(data=st.data())
    def read(self, data):
        name = data.draw(st.sampled_from(self.written()), label="tensor")
        was_evicted = self.evicted(name)
        self.op()
        try:
            got = tensor.to_numpy(self.tensors[name])
        except OutOfMemory:
            self.check_nothing_could_move()
            assert self.evicted(name), "a failed fetch lost the host copy"
            return
        if was_evicted:
            self.fetched(name)
        assert np.array_equal(got, self.values[name]), f"{name} read back changed"

    @precondition(lambda self: self.tensors)
    @rule(data=st.data(), operator=st.sampled_from(["Conv2d", "Dense"]))
    def keep(self, data, operator):
        """An operator saves the tensor for backward (Operator.save)."""
        self.keep_tensor(data.draw(st.sampled_from(sorted(self.tensors)), label="tensor"), operator)

    def keep_tensor(self, name, operator):
        t = self.tensors[name]
        new = name in self.born or not t.block.allocated
        moving = name in self.pending or self.evicted(name)  # a candidate moved out already
        self.op()
        self.dev.keep_for_backward(operator, [t])
        if new and not moving and (self.policy == "all" or operator == "Conv2d"):
            self.candidates.setdefault(name, 0)
            self.use(name)

    @precondition(lambda self: self.tensors)
    @rule(data=st.data())
    def operate(self, data):
        """An operation through device.exec: it writes some tensors (allocated on the way if
        new) from what it reads; inside, every tensor it holds is on the device, intact."""
        written = self.written()
        reads = (
            data.draw(st.lists(st.sampled_from(written), max_size=3), label="reads")
            if written
            else []
        )
        writes = data.draw(
            st.lists(st.sampled_from(sorted(self.tensors)), min_size=1, max_size=2, unique=True),
            label="writes",
        )
        seed = self.tag
        self.tag += 1
        expected = [self.values[n] for n in reads]
        held = [self.tensors[n] for n in writes + reads]

        def kernel(*arrays):
            for name, t in zip(writes + reads, held):
                assert t.block.offset is not None, f"{name} is not on the device in its kernel"
            total = np.float32(0)
            for name, got, want in zip(reads, arrays[len(writes) :], expected):
                assert np.array_equal(got, want), f"{name} changed before its kernel read it"
                total += got[0]
            for out in arrays[: len(writes)]:
                out[:] = self.value(out.size, seed) + total

        # where each tensor was before: never allocated, evicted, or on the device
        before = {
            n: "new"
            if not self.tensors[n].block.allocated
            else "evicted"
            if self.evicted(n)
            else "on the device"
            for n in writes + reads
        }
        self.in_operation = set(writes + reads)
        self.op()
        try:
            self.dev.exec(kernel, [self.tensors[n] for n in reads], held[: len(writes)], "op")
        except OutOfMemory:
            self.check_nothing_could_move()
            self.after_failed_operation(writes + reads, before)
            return
        finally:
            self.in_operation = set()
        total = np.float32(0)
        for want in expected:
            total += want[0]
        for name in writes:
            self.values[name] = self.value(self.tensors[name].size(), seed) + total
        self.after_operation(writes + reads, before)

    def after_operation(self, names, before):
        """exec brings each tensor in, in order (writes, then reads): a new one gets bytes (it
        is then made in this step), an evicted one comes back (a miss); then it touches it: a
        hit for a candidate, which becomes the most recently used."""
        for name in names:
            where = before.pop(name, "on the device")  # a tensor named twice comes in once
            if where == "new":
                self.born.add(name)
            elif where == "evicted":
                self.fetched(name)
            if name in self.candidates:
                self.counters["cache.hits"] += 1
            self.use(name)

    def after_failed_operation(self, names, before):
        """The tensors before the one that could not get bytes were brought in and touched;
        new ones among them hold garbage (their kernel never ran)."""
        done = next(i for i, n in enumerate(names) if not self.on_device(n))
        self.after_operation(names[:done], before)
        for name in names[:done]:
            if self.values[name] is None:
                self.values[name] = UNKNOWN

    @precondition(lambda self: self.tensors)
    @rule(data=st.data())
    def free(self, data):
        name = data.draw(st.sampled_from(sorted(self.tensors)), label="tensor")
        t = self.tensors.pop(name)
        for table in (self.values, self.candidates):
            table.pop(name, None)
        self.born.discard(name)
        self.op()
        if name in self.pending:  # the queued copy holds the block until it ends
            self.orphans[name] = t.block
            event("a tensor freed while its copy-out is queued")
        else:
            del self.name_of[id(t.block)]
        block = t.block
        del t  # the last reference: the bytes and any host copy go back, unless a copy is queued
        if name not in self.orphans:
            assert block.offset is None and block.host is None, f"freed {name} kept its bytes"

    @rule(swap_cache=st.booleans())
    def next_step(self, swap_cache):
        """A new step: the counters start again, and this step's tensors are no longer new;
        or first a new cache (a compile between the steps)."""
        self.op()
        self.step.close()
        if swap_cache:
            self.replace_cache()
        self.step.enter_context(self.dev.step())
        self.born.clear()
        self.counters = dict.fromkeys(self.counters, 0)

    def replace_cache(self):
        """Model.compile sets a new cache: the old one brings back what it moved out, first."""
        new = watched(self.cache_class, self)(self.dev, self.policy)
        moved = [n for n in self.tensors if self.evicted(n)]
        try:
            self.dev.set_memory_budget(self.budget, new)
        except OutOfMemory:
            event("a new cache refused: what was moved out does not fit")
            assert self.dev.cache is self.cache, "a refused swap changed the cache"
            for name in moved:
                if not self.evicted(name):
                    self.fetched(name)
            self.lru_known = False  # the order they came back in is the cache's own
            return
        for name in moved:
            self.fetched(name)  # counted by the old cache, which is gone
        assert not self.pending and all(not self.evicted(n) for n in self.tensors)
        self.cache = new
        self.candidates.clear()
        self.born.clear()
        self.lru_known = True
        self.counters = dict.fromkeys(self.counters, 0)

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def values_are_intact_wherever_they_are(self):
        for name, want in self.values.items():
            if want is None or want is UNKNOWN:
                continue
            block = self.tensors[name].block
            if block.offset is not None:
                got = self.dev.storage.view(block.offset, block.nbytes).view(np.float32)
            else:
                assert block.host is not None, f"{name} is written but nowhere"
                got = block.host.array((want.size,), np.float32)
            assert np.array_equal(got, want), f"{name}'s bytes changed"

    @invariant()
    def the_pools_hold_exactly_the_tensors(self):
        stats = self.dev.memory_stats()
        blocks = {n: t.block for n, t in self.tensors.items()} | self.orphans
        on_device = [b for b in blocks.values() if b.offset is not None]
        on_host = [b for n, b in blocks.items() if b.host is not None or n in self.pending]
        assert stats["allocated_bytes.current"] == sum(aligned_size(b.nbytes, A) for b in on_device)
        assert stats["host.allocated_bytes.current"] == sum(
            aligned_size(b.nbytes, A) for b in on_host
        )
        if self.budget is not None:
            assert stats["allocated_bytes.peak"] <= self.budget, "the pool passed its budget"

    @invariant()
    def counters_count_what_happened(self):
        stats = self.dev.memory_stats()
        got = {key: stats[key] for key in self.counters}
        assert got == self.counters, f"counters {got}, expected {self.counters}"


# Each example makes a small device: its copy stream's worker thread stays, idle, until the
# process ends (a deep run leaves a few hundred).
CacheMachine.TestCase.settings = settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
TestCacheMachine = CacheMachine.TestCase


def _made(dev, n, saved):
    """A tensor of n float32 values 0, 1, ..., saved for backward (a cache candidate) or not."""
    t = tensor.Tensor((n,), dev, requires_grad=False)
    t.copy_from_numpy(np.arange(n, dtype=np.float32))
    if saved:
        dev.keep_for_backward("Conv2d", [t])
    return t


def _two_candidates_leaving(dev):
    """Tensors that fill a 16-block pool, the last one's allocation queueing the copy-outs of
    the two candidates (held[0] and held[1]): the state both tests below start from."""
    held = [_made(dev, 65, True), _made(dev, 64, True), _made(dev, 64, False)]
    held.append(_made(dev, 768, False))
    held.append(_made(dev, 75, False))  # the pool is full: the two candidates start to leave
    return held


def test_a_copy_out_that_began_before_the_operation_locked_its_tensor_keeps_it():
    """An allocation can end with copy-outs still pending (the bytes it asked for, unrounded,
    were covered before its pool block was). The next operation that reads such a tensor locks
    it; if that operation's own allocation settled the copy by evicting the tensor, the tensor
    came back at once, in another place: a locked tensor evicted, and a fetch for nothing."""
    dev = device.create_cpu_device(16 * A)
    dev.set_memory_budget(None, TensorCache(dev, "all"))
    with dev.step():
        first = _made(dev, 65, True)  # 260 bytes in a 512-byte block: the least recently used
        b, other = _made(dev, 64, True), _made(dev, 64, True)
        rest = [
            _made(dev, 768, False),
            _made(dev, 75, False),
        ]  # full; then 300 bytes: the first two
        # candidates start to leave, and the first one's bytes suffice
        assert id(b.block) in dev.cache.pending
        where, seen = b.block.offset, []
        out = tensor.Tensor((64,), dev, requires_grad=False)

        def kernel(y, x):
            seen.append(b.block.offset)
            y[:] = x

        dev.exec(kernel, [b], [out], "copy")
        assert seen == [where], "the locked tensor left the device and came back"
        stats = dev.memory_stats()
        assert stats["cache.misses"] == 0 and other.block.host is not None
        assert first.block.host is not None and all(t.block.offset is not None for t in rest)
        np.testing.assert_array_equal(tensor.to_numpy(out), np.arange(64, dtype=np.float32))


def test_a_tensor_saved_again_while_its_copy_out_is_queued_is_freed_with_its_copy():
    """Saved again (Operator.save) while its copy-out was queued, a tensor went back among the
    resident candidates: the next eviction copied it out a second time, and the first host copy
    and the tensor's own bytes were never freed."""
    dev = device.create_cpu_device(16 * A)
    dev.set_memory_budget(None, TensorCache(dev, "all"))
    with dev.step():
        held = _two_candidates_leaving(dev)
        b = held[1]
        assert id(b.block) in dev.cache.pending
        dev.keep_for_backward("Conv2d", [b])  # saved again
        with pytest.raises(OutOfMemory):
            _made(dev, 128, False)  # 512 bytes: more than the two candidates free
        np.testing.assert_array_equal(tensor.to_numpy(b), np.arange(64, dtype=np.float32))
        held.clear()
        del b
    dev.set_memory_budget(None, None)
    stats = dev.memory_stats()
    assert stats["allocated_bytes.current"] == stats["host.allocated_bytes.current"] == 0


def test_a_host_write_to_a_tensor_whose_copy_out_is_queued_is_kept():
    """The copy-out read the old bytes; the write went to the device bytes, which the cache then
    freed: the tensor came back from the host with its old value."""
    dev = device.create_cpu_device(16 * A)
    dev.set_memory_budget(None, TensorCache(dev, "all"))
    with dev.step():
        held = _two_candidates_leaving(dev)
        b = held[1]
        assert id(b.block) in dev.cache.pending
        dev.Sync()  # the copy-out has read b's bytes
        b.copy_from_numpy(np.full(64, 7, np.float32))
        held.append(_made(dev, 64, False))  # needs b's bytes: b leaves now, with its new value
        assert b.block.host is not None
        held.pop()  # room for b to come back
        np.testing.assert_array_equal(tensor.to_numpy(b), np.full(64, 7, np.float32))
