"""The property tests must catch a broken memory layer: each test here gives one of them a copy
of the code with one deliberate bug (a mutant), lets Hypothesis search a small, fixed budget of
examples, and asserts that it fails, with the message of the invariant that should catch it.

A property test that passes on every mutant checks nothing. The budgets are small and the
search derandomized (the same examples every run), so that these stay fast and never flaky.
"""

import bisect
import weakref
from collections import OrderedDict

import pytest
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.stateful import run_state_machine_as_test
from property_counts import COUNTS
from test_cache_properties import CacheMachine
from test_host_properties import HostMachine
from test_layout_properties import check_the_checker, check_the_layout, offsets_for, slots
from test_pool_properties import PoolMachine

from nnmem.memory import layout as layout_module
from nnmem.memory.arena import SharedArena
from nnmem.memory.cache import TensorCache
from nnmem.memory.host import HostMemory
from nnmem.memory.pool import Pool

pytestmark = pytest.mark.properties


@pytest.fixture(autouse=True)
def _uncounted():
    """A mutant's operations say nothing about nnmem: they stay out of the run's figures."""
    before = COUNTS.copy()
    yield
    COUNTS.clear()
    COUNTS.update(before)


def search(examples, steps=60):
    """A small, derandomized search that stops at the first failure (no shrinking)."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        phases=[Phase.generate],
        derandomize=True,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )


def assert_caught(machine, match, examples=200, **under_test):
    """`machine`, with `under_test` (class attributes: the mutant) swapped in, must fail an
    assertion whose message matches `match`."""
    mutant = type(f"{machine.__name__}OnAMutant", (machine,), under_test)
    with pytest.raises(AssertionError, match=match):
        run_state_machine_as_test(mutant, settings=search(examples))


# -- the pool ----------------------------------------------------------------------------------


class LeftNeighbourNotMerged(Pool):
    """free() merges a block with the free segment after it, never with the one before."""

    def free(self, offset):
        if offset not in self._live:
            return super().free(offset)  # the real error for an offset that is no block
        with self._lock:
            size, nbytes, _, _ = self._live.pop(offset)
            self._allocated -= size
            self._requested -= nbytes
            self._num_frees += 1
            end = offset + size
            if end in self._free_size:
                end += self._remove_free(end)
            self._add_free(offset, end - offset)


class RemainderStartsTooLow(Pool):
    """Splitting a free segment, the remainder starts one alignment early: inside the block."""

    splitting = False

    def alloc(self, nbytes, owner=None):
        self.splitting = True  # alloc's only _add_free is the remainder of the split
        try:
            return super().alloc(nbytes, owner)
        finally:
            self.splitting = False

    def _add_free(self, offset, size):
        if self.splitting:
            offset, size = offset - self.alignment, size + self.alignment
        super()._add_free(offset, size)


class BestFitTakesTheHighestOfEqualSizes(Pool):
    """Best fit finds the smallest size that fits, but among segments of that size takes the
    highest offset (the contract: the lowest)."""

    def _find_free(self, size):
        if self.policy != "best_fit":
            return super()._find_free(size)
        i = bisect.bisect_left(self._free_by_size, (size, -1))
        if i == len(self._free_by_size):
            return None
        smallest = self._free_by_size[i][0]
        return self._free_by_size[bisect.bisect_right(self._free_by_size, (smallest, 2**62)) - 1][1]


class BestFitTakesTheLargest(Pool):
    """ "Best" fit carves every request from the largest free segment (worst fit)."""

    def _find_free(self, size):
        if self.policy != "best_fit" or self._largest_free() < size:
            return super()._find_free(size)
        return self._free_by_size[-1][1]


class BudgetIgnored(Pool):
    """alloc() never looks at the budget."""

    def alloc(self, nbytes, owner=None):
        budget, self.budget = self.budget, None
        try:
            return super().alloc(nbytes, owner)
        finally:
            self.budget = budget


def test_a_coalesce_that_forgets_the_left_neighbour_is_caught():
    assert_caught(PoolMachine, "adjacent free segments", pool_class=LeftNeighbourNotMerged)


def test_a_split_whose_remainder_overlaps_the_block_is_caught():
    """Whichever invariant sees the overlap first: the segments no longer tile the pool, an
    offset is handed out twice, or a block's bytes are clobbered."""
    assert_caught(
        PoolMachine,
        "segments must be contiguous|handed out twice|clobbered",
        pool_class=RemainderStartsTooLow,
    )


@pytest.mark.parametrize("mutant", [BestFitTakesTheHighestOfEqualSizes, BestFitTakesTheLargest])
def test_a_wrong_best_fit_choice_is_caught(mutant):
    assert_caught(PoolMachine, "best_fit picked", pool_class=mutant)


def test_an_allocation_past_the_budget_is_caught():
    assert_caught(PoolMachine, "past the budget", pool_class=BudgetIgnored)


# -- the layout --------------------------------------------------------------------------------


def place_forgetting_the_last_position(sizes, ranges, order):
    """_place as if each slot were dead at its last position: slots that meet there share."""
    return real_place(sizes, [(first, last - 0.5) for first, last in ranges], order)


def place_with_a_short_arena(sizes, ranges, order):
    """_place reporting the highest offset as the arena's size, not the highest end."""
    offsets, _ = real_place(sizes, ranges, order)
    return offsets, max(offsets, default=0)


def lower_bound_off_by_one(sizes, ranges):
    """The lower bound with each slot dead at its last position already."""
    return real_lower_bound(sizes, [(first, last - 1) for first, last in ranges])


real_place, real_lower_bound = layout_module._place, layout_module.lower_bound


def breaks_the_layout(case):
    try:
        check_the_layout(*case, make_layout=layout_module.layout)
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize(
    "name, mutant",
    [
        ("_place", place_forgetting_the_last_position),  # an overlapping placement
        ("_place", place_with_a_short_arena),
        ("lower_bound", lower_bound_off_by_one),
    ],
)
def test_a_broken_layout_is_caught(monkeypatch, name, mutant):
    monkeypatch.setattr(layout_module, name, mutant)
    find(slots(), breaks_the_layout, settings=search(200))


def check_layout_blind_at_the_last_position(sizes, ranges, offsets):
    """check_layout, as if two slots meeting at one position were never live together."""
    layout_module.check_layout(sizes, [(first, last - 0.5) for first, last in ranges], offsets)


def test_a_check_layout_that_misses_a_clash_is_caught():
    def misses_a_clash(case):
        sizes, ranges, offsets = case
        try:
            check_the_checker(sizes, ranges, offsets, check=check_layout_blind_at_the_last_position)
        except AssertionError:
            return True
        return False

    cases = slots().flatmap(lambda c: offsets_for(c[0]).map(lambda offsets: (*c, offsets)))
    find(cases, misses_a_clash, settings=search(200))


# -- the host pool and its arena ---------------------------------------------------------------


class ArenaPlacingOnlyTheNewcomer(SharedArena):
    """join() that, when the arena moves, places the step that joined but not the others."""

    def join(self, step, nbytes):
        if step not in self._needs:
            weakref.finalize(step, self._release_if_unused)
        self._needs[step] = nbytes
        if nbytes > self.size:
            self._resize(nbytes)
        self._users.add(step)
        getattr(step, self._place)(self.offset)  # the others stay where the arena was


class HostMemoryWithAMutantArena(HostMemory):
    def __init__(self, capacity, make_storage, name):
        super().__init__(capacity, make_storage, name)
        self.graph_arena = ArenaPlacingOnlyTheNewcomer(self.pool, place="place_host")


class HostMemoryReservingAtOnce(HostMemory):
    """Makes the host bytes when it is made, not on first use."""

    def __init__(self, capacity, make_storage, name):
        super().__init__(capacity, make_storage, name)
        self._storage = make_storage(self.pool.capacity, self.pool.alignment)


class HostMemoryNeverFreeing(HostMemory):
    """A host block whose last reference goes keeps its bytes."""

    def on_unreferenced(self, block):
        pass


@pytest.mark.parametrize(
    "mutant, match",
    [
        (HostMemoryWithAMutantArena, "placed at a stale offset"),
        (HostMemoryReservingAtOnce, "host storages"),
        (HostMemoryNeverFreeing, "kept its bytes"),
    ],
)
def test_a_broken_host_pool_is_caught(mutant, match):
    assert_caught(HostMachine, match, host_class=mutant)


# -- the tensor cache --------------------------------------------------------------------------


class CacheIgnoringLocks(TensorCache):
    """Evicts the tensors the running operation holds, too."""

    def _evict_for(self, shortfall):
        locked, self.locked = self.locked, {}
        try:
            super()._evict_for(shortfall)
        finally:
            self.locked = locked


class CacheEvictingTheMostRecent(TensorCache):
    """Evicts the most recently used candidates first."""

    def _evict_for(self, shortfall):
        self.resident = OrderedDict(reversed(self.resident.items()))
        try:
            super()._evict_for(shortfall)
        finally:
            self.resident = OrderedDict(reversed(self.resident.items()))


class CacheNotCopying(TensorCache):
    """Frees the device bytes of an evicted tensor without copying them to the host."""

    def _copy_out(self, block):
        queue_copy = self.device.queue_copy
        self.device.queue_copy = lambda *args: None
        try:
            super()._copy_out(block)
        finally:
            self.device.queue_copy = queue_copy


@pytest.mark.parametrize(
    "mutant, match",
    [
        (CacheIgnoringLocks, "while an operation holds it"),
        (CacheEvictingTheMostRecent, "used less recently"),
        (CacheNotCopying, "changed"),
    ],
)
def test_a_broken_tensor_cache_is_caught(mutant, match):
    assert_caught(CacheMachine, match, cache_class=mutant)
