"""Property tests for the host pool (nnmem/memory/host.py) and its graph arena
(nnmem/memory/arena.py): random host blocks and compiled steps against a model.

The host pool holds offloaded tensors' copies: Blocks in a Pool over host bytes. Its contract:
  * the host bytes are made on the first view, never before (a device that never offloads
    reserves no host memory), once, as large as the pool;
  * a host block's bytes are its own: a pattern written into it survives every other block's
    life and the arena's moves; a view past its end is refused;
  * a block whose last reference goes is freed at once; the statistics are the pool's, named
    ``host.*``, and count exactly the live blocks and the arena;
and the arena's (SharedArena, as compiled steps use it):
  * every step in the arena is placed at the arena's offset, whenever the arena moves;
  * the arena is as large as the largest plan that joined it, and one pool block of that size;
  * a join fails (OutOfMemory) only when the pool cannot hold the larger arena, and then leaves
    every step placed as before; a replan that fails keeps the step's old plan, placed;
  * ``fit`` shrinks it to the largest plan still in it; it goes back to the pool when no step
    is left (left, or collected by the garbage collector).
tests/test_property_mutants.py checks that these tests catch a broken host pool and arena.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from property_counts import count
from test_pool_properties import pattern

from nnmem.memory.errors import OutOfMemory
from nnmem.memory.host import HostMemory
from nnmem.memory.pool import ALIGNMENT
from nnmem.memory.storage import HostStorage
from nnmem.memory.units import aligned_size

pytestmark = pytest.mark.properties

A = ALIGNMENT


class Step:
    """A stand-in for a compiled step in the host arena: it remembers where it was placed."""

    def __init__(self, name):
        self.name = name
        self.offset = "never placed"

    def place_host(self, offset):
        self.offset = offset


class HostMachine(RuleBasedStateMachine):
    host_class = HostMemory  # under test (the mutation tests swap in broken copies)

    @initialize(capacity=st.integers(4 * 1024, 32 * 1024))
    def setup(self, capacity):
        self.storages = []  # every storage the host pool asked for: (capacity, alignment)
        self.host = self.host_class(capacity, self.make_storage, "test device")
        self.pool, self.arena = self.host.pool, self.host.graph_arena
        self.viewed = False  # has anything viewed host bytes yet?
        self.blocks = {}  # tag -> (block, written?)
        self.steps = {}  # name -> (Step, its plan's bytes): the steps in the arena
        self.held = False  # does the arena hold a pool block (the model's, not the arena's)?
        self.arena_bytes = 0  # the arena's size, as the model expects it
        self.tag = 0

    def make_storage(self, capacity, alignment):
        self.storages.append((capacity, alignment))
        return HostStorage(capacity, alignment)

    def op(self):
        count("host pool operations")

    def view(self, block):
        self.viewed = True
        return block.array((block.nbytes,), np.uint8)

    # -- host blocks ------------------------------------------------------------------------

    @rule(nbytes=st.integers(0, 4096))
    def make_block(self, nbytes):
        block = self.host.new_block(nbytes, f"host block #{self.tag}")
        block.inc_ref()  # the tensor that holds it
        self.op()
        try:
            block.ensure_allocated()
        except OutOfMemory:
            block.dec_ref()  # never allocated: nothing to free
            return
        assert self.pool.size_of(block.offset) == aligned_size(nbytes, A)
        self.blocks[self.tag] = (block, False)
        self.tag += 1

    @precondition(lambda self: self.blocks)
    @rule(data=st.data())
    def write(self, data):
        tag = data.draw(st.sampled_from(sorted(self.blocks)), label="block")
        block, _ = self.blocks[tag]
        self.op()
        self.view(block)[:] = pattern(tag, block.nbytes)
        self.blocks[tag] = (block, True)

    @precondition(lambda self: self.blocks)
    @rule(data=st.data())
    def release(self, data):
        tag = data.draw(st.sampled_from(sorted(self.blocks)), label="block")
        block, written = self.blocks.pop(tag)
        if written:
            assert np.array_equal(self.view(block), pattern(tag, block.nbytes)), "clobbered"
        self.op()
        block.dec_ref()  # the last reference: freed now
        assert block.offset is None, "a block freed by its last reference kept its bytes"

    @precondition(lambda self: self.blocks)
    @rule(data=st.data())
    def view_past_the_end(self, data):
        tag = data.draw(st.sampled_from(sorted(self.blocks)), label="block")
        block, _ = self.blocks[tag]
        self.op()
        with pytest.raises(ValueError, match="do not fit"):
            self.host.view(block.offset, aligned_size(block.nbytes, A) + 1)

    # -- the arena --------------------------------------------------------------------------

    def room_for(self, nbytes):
        """Could the pool hold an arena of `nbytes` once the arena's current block is free?"""
        segments = [
            (off, size, free or (self.held and off == self.arena.offset))
            for off, size, free in self.pool.segments()
        ]
        largest = run = 0
        for _, size, free in segments:  # free runs, the arena's block merged with neighbours
            run = run + size if free else 0
            largest = max(largest, run)
        return aligned_size(nbytes, A) <= largest

    def join(self, step, nbytes):
        """Join as CompiledStep does: the step leaves again if the arena cannot grow."""
        grows = nbytes > self.arena_bytes
        fits = self.room_for(nbytes)
        before = self.arena_bytes
        self.op()
        try:
            self.arena.join(step, nbytes)
        except OutOfMemory:
            assert grows and not fits, f"the arena could not grow to {nbytes} bytes in the pool"
            assert self.arena.size == before
            event("a join refused: the pool cannot hold the larger arena")
            self.arena.leave(step)
            self.forget(step)
            return False
        assert not grows or fits, f"the arena grew to {nbytes} bytes, more than the pool has"
        self.steps[step.name] = (step, nbytes)
        if grows:
            self.arena_bytes, self.held = nbytes, True
        return True

    def forget(self, step):
        """`step` left the arena: with no step left, the arena goes back to the pool."""
        self.steps.pop(step.name, None)
        if not self.steps:
            self.held, self.arena_bytes = False, 0

    @rule(nbytes=st.integers(0, 16 * 1024))
    def join_new_step(self, nbytes):
        self.join(Step(f"step #{self.tag}"), nbytes)
        self.tag += 1

    @precondition(lambda self: self.steps)
    @rule(data=st.data(), nbytes=st.integers(0, 16 * 1024))
    def replan(self, data, nbytes):
        """CompiledStep.replan: leave, join with the new plan; if it does not fit, join again
        with the old one, which must fit (its bytes were just given back)."""
        name = data.draw(st.sampled_from(sorted(self.steps)), label="step")
        step, old = self.steps[name]
        self.op()
        self.arena.leave(step)
        self.forget(step)
        if not self.join(step, nbytes):
            event("a replan refused, the old plan placed again")
            assert self.join(step, old), "a failed replan could not place the old plan again"

    @precondition(lambda self: self.steps)
    @rule(data=st.data(), collected=st.booleans())
    def leave(self, data, collected):
        """A step leaves for good: by leave(), or collected by the garbage collector."""
        name = data.draw(st.sampled_from(sorted(self.steps)), label="step")
        step, _ = self.steps[name]
        self.forget(step)
        self.op()
        if collected:
            del step  # the last reference: the arena's finalizer runs now
        else:
            self.arena.leave(step)

    @rule()
    def fit(self):
        largest = max((nbytes for _, nbytes in self.steps.values()), default=0)
        self.op()
        self.arena.fit()
        if self.held and largest < self.arena_bytes:
            self.arena_bytes = largest

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def host_bytes_are_made_on_first_use_once(self):
        expected = [(self.pool.capacity, A)] if self.viewed else []
        assert self.storages == expected, f"host storages {self.storages}, expected {expected}"

    @invariant()
    def blocks_are_intact(self):
        for tag, (block, written) in self.blocks.items():
            assert self.pool.size_of(block.offset) == aligned_size(block.nbytes, A), "block size"
            if written:
                assert np.array_equal(self.view(block), pattern(tag, block.nbytes)), (
                    f"host block #{tag} clobbered"
                )

    @invariant()
    def steps_are_placed_in_the_arena(self):
        assert self.arena.size == self.arena_bytes, "the arena's size"
        if self.held:
            assert self.pool.size_of(self.arena.offset) == aligned_size(self.arena_bytes, A), (
                "the arena's pool block is not its size"
            )
        else:
            assert self.arena.offset is None, "an arena no step uses still holds its block"
        for step, nbytes in self.steps.values():
            assert step in self.arena and nbytes <= self.arena.size, f"{step.name} not in the arena"
            assert step.offset == self.arena.offset, f"{step.name} placed at a stale offset"

    @invariant()
    def statistics_count_the_blocks_and_the_arena(self):
        stats = self.host.stats()
        assert stats == {f"host.{key}": value for key, value in self.pool.stats().items()}, (
            "host statistics are not the pool's"
        )
        expected = sum(aligned_size(b.nbytes, A) for b, _ in self.blocks.values())
        expected += aligned_size(self.arena_bytes, A) if self.held else 0
        assert stats["host.allocated_bytes.current"] == expected, "host bytes miscounted"
        assert stats["host.active_blocks"] == len(self.blocks) + self.held, "host blocks miscounted"


HostMachine.TestCase.settings = settings(suppress_health_check=[HealthCheck.too_slow])
TestHostMachine = HostMachine.TestCase
