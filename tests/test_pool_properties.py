"""Property tests for the pool: random alloc/free sequences against a simple model.

The allocator-fuzzer idea (as in tinygrad's): every block gets its own byte pattern
on alloc, and the pattern must still be intact when the block is freed and after
every step. Overlapping blocks, a split in the wrong place or a bad coalesce shows
up as a clobbered pattern, not only as a broken counter. A budget (Model.compile's
budget=...) comes and goes between the calls too.

Run them with `python -m pytest -m properties` (NNMEM_PROPERTIES=deep: a longer search,
see tests/conftest.py); tests/test_property_mutants.py checks that they catch a broken pool.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from property_counts import count

from nnmem.memory.errors import OutOfMemory
from nnmem.memory.pool import ALIGNMENT, Pool
from nnmem.memory.storage import HostStorage

pytestmark = pytest.mark.properties

A = ALIGNMENT


def pattern(tag: int, size: int) -> np.ndarray:
    """A byte pattern unique to block `tag` (and position-dependent, to catch shifted copies)."""
    return np.random.default_rng(tag).integers(0, 256, size, dtype=np.uint8)


def expected_choice(free_segments, need, policy):
    """Which free segment the policy must pick, from the layout *before* the alloc."""
    fits = [(off, size) for off, size in free_segments if size >= need]
    if not fits:
        return None
    if policy == "first_fit":
        return min(fits)[0]
    return min(fits, key=lambda s: (s[1], s[0]))[0]


def budget_left(free, allocated, budget):
    """The bytes a pool may still hand out: its free bytes, or fewer under a budget."""
    return free if budget is None else max(min(free, budget - allocated), 0)


class PoolMachine(RuleBasedStateMachine):
    pool_class = Pool  # the allocator under test (the mutation tests swap in broken copies)

    @initialize(
        capacity=st.integers(4 * 1024, 64 * 1024),
        policy=st.sampled_from(["best_fit", "first_fit"]),
    )
    def setup(self, capacity, policy):
        self.pool = self.pool_class(capacity, policy=policy)
        self.storage = HostStorage(self.pool.capacity, self.pool.alignment)  # the bytes
        self.policy = policy
        self.cap = capacity - capacity % A
        self.live = {}  # offset -> (tag, rounded size, requested bytes, owner)
        self.tag = 0
        self.allocs = self.frees = 0
        self.peak = 0
        self.high_water = 0
        self.budget = None  # Pool.budget: the most bytes allocated at once (None: no limit)

    def allocated(self):
        return sum(size for _, size, _, _ in self.live.values())

    def count(self):
        count("pool operations")

    @rule(data=st.data())
    def alloc(self, data):
        nbytes = data.draw(
            st.one_of(
                st.integers(1, self.cap // 4),
                st.integers(1, max(1, self.cap // 4 // A)).map(lambda k: k * A),  # exact multiples
                st.just(0),
            ),
            label="nbytes",
        )
        self.allocate(nbytes)

    @rule(size=st.sampled_from([A, 2 * A, 3 * A]), blocks=st.integers(2, 6))
    def alloc_alike(self, size, blocks):
        """Several blocks of one size in a row, as a layer's tensors of one shape: their frees
        leave holes of equal sizes, between which best fit's tie-break (lowest offset) decides."""
        for _ in range(blocks):
            self.allocate(size)

    def allocate(self, nbytes):
        need = -(-max(nbytes, 1) // A) * A
        free_before = [(off, size) for off, size, is_free in self.pool.segments() if is_free]
        want = expected_choice(free_before, need, self.policy)
        over_budget = self.budget is not None and self.allocated() + need > self.budget
        owner = f"block #{self.tag}"
        self.count()
        try:
            off = self.pool.alloc(nbytes, owner=owner)
        except OutOfMemory as e:
            # The pool may only refuse when indeed no free segment is large enough, or the
            # budget would be passed. The error says what was left: as the budget counts it
            # when the budget refused, else what the pool has (no segment is large enough).
            assert over_budget or want is None, f"OOM although segment {want} fits {need} bytes"
            assert e.request == need and e.nbytes == nbytes
            free, largest = self.cap - self.allocated(), max((s for _, s in free_before), default=0)
            if over_budget:
                free = budget_left(free, self.allocated(), self.budget)
                largest = min(largest, free)
            assert (e.free_bytes, e.largest_free_block) == (free, largest), "OOM's figures"
            assert e.capacity == (self.budget if over_budget else self.cap), "OOM's capacity"
            assert e.largest_free_block < need, "OOM although the largest free block fits"
            return
        assert not over_budget, f"{need} bytes allocated past the budget of {self.budget}"
        assert off == want, f"{self.policy} picked {off}, expected {want}"
        assert off not in self.live, f"offset {off} handed out twice"
        size = self.pool.size_of(off)
        assert size == need, f"a block of {size} bytes for a request of {need}"
        self.storage.view(off, size)[:] = pattern(self.tag, size)  # the whole rounded block
        self.live[off] = (self.tag, size, nbytes, owner)
        self.tag += 1
        self.allocs += 1
        self.peak = max(self.peak, self.allocated())
        self.high_water = max(self.high_water, off + size)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        off = data.draw(st.sampled_from(sorted(self.live)), label="offset")
        tag, size, _, _ = self.live.pop(off)
        assert np.array_equal(self.storage.view(off, size), pattern(tag, size)), (
            f"block #{tag} clobbered"
        )
        self.count()
        self.pool.free(off)
        self.frees += 1

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def double_free_is_rejected(self, data):
        off = data.draw(st.sampled_from(sorted(self.live)), label="offset")
        size = self.live[off][1]
        if size > A:  # an offset inside a live block is not a block start
            self.count()
            try:
                self.pool.free(off + A)
            except ValueError:
                pass
            else:
                raise AssertionError("free() accepted an offset inside a block")

    @rule()
    def reset_peak(self):
        self.count()
        self.pool.reset_peak()
        self.peak = self.allocated()
        self.high_water = max((off + v[1] for off, v in self.live.items()), default=0)

    @rule(data=st.data())
    def set_budget(self, data):
        """A budget, as Device.set_memory_budget sets it: any byte count, even below what is
        allocated now (then nothing more fits until enough is freed), or none."""
        self.budget = data.draw(st.none() | st.integers(0, self.cap), label="budget")
        self.count()
        self.pool.budget = self.budget

    # -- invariants, checked after every step --------------------------------

    @invariant()
    def layout_tiles_the_arena(self):
        segs = self.pool.segments()
        pos = 0
        for off, size, _ in segs:
            assert off == pos, "segments must be contiguous"
            assert size > 0 and off % A == 0 and size % A == 0
            pos += size
        assert pos == self.cap
        assert not any(a[2] and b[2] for a, b in zip(segs, segs[1:])), "adjacent free segments"
        used = {(off, size) for off, size, is_free in segs if not is_free}
        assert used == {(off, v[1]) for off, v in self.live.items()}, (
            "live blocks differ from the model"
        )

    @invariant()
    def blocks_are_intact(self):
        for off, (tag, size, _, _) in self.live.items():
            assert np.array_equal(self.storage.buffer[off : off + size], pattern(tag, size)), (
                f"block #{tag} clobbered"
            )

    @invariant()
    def stats_match_the_model(self):
        s = self.pool.stats()
        segs = self.pool.segments()
        free_sizes = [size for _, size, is_free in segs if is_free]
        allocated = self.allocated()
        assert s["allocated_bytes.current"] == allocated
        assert allocated + sum(free_sizes) == s["reserved_bytes"] == self.cap
        assert s["budget_bytes"] == self.budget
        left = budget_left(sum(free_sizes), allocated, self.budget)
        assert s["free_bytes"] == left
        assert s["largest_free_block"] == min(max(free_sizes, default=0), left)
        assert self.pool.largest_free_block() == s["largest_free_block"]  # asked alone
        assert s["free_segments"] == len(free_sizes)
        assert s["requested_bytes.current"] == sum(v[2] for v in self.live.values())
        assert s["num_allocs"] == self.allocs and s["num_frees"] == self.frees
        assert s["num_allocs"] - s["num_frees"] == s["active_blocks"] == len(self.live)
        assert s["allocated_bytes.peak"] == self.peak
        assert s["high_water_bytes"] == self.high_water
        assert s["allocated_bytes.peak"] <= s["high_water_bytes"]  # live bytes fit below the mark
        live = self.pool.live_blocks()
        assert [b[1] for b in live] == sorted((b[1] for b in live), reverse=True)
        assert {b[0]: b[2] for b in live} == {off: v[3] for off, v in self.live.items()}


# Half as many examples again as the profile's (150 of 60 steps in CI): each is cheap, and the
# pool is what every other part of nnmem stands on. No deadline, whatever the profile: tutorial
# 00 imports this module before pytest loads one.
PoolMachine.TestCase.settings = settings(
    deadline=None,
    max_examples=settings.default.max_examples * 3 // 2,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPoolMachine = PoolMachine.TestCase
