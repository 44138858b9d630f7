"""Exercise 4 (tutorial 03): the lower bound of a step's memory,
nnmem/memory/layout.py:lower_bound.

LB = max over positions p of the bytes of the slots live at p, a slot i being live from
first_i to last_i inclusive (exercises/03_lower_bound.md). The tests check small cases by hand,
random ones against a position-by-position count, and the bound a compiled step reports."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from training import planned_step

from nnmem.memory.layout import check_layout, layout, lower_bound

pytestmark = pytest.mark.exercise_lower_bound


def count(sizes, ranges):
    """The definition, position by position."""
    positions = {p for first, last in ranges for p in range(first, last + 1)}
    return max(
        (
            sum(s for s, (first, last) in zip(sizes, ranges) if first <= p <= last)
            for p in positions
        ),
        default=0,
    )


# -- the function itself --------------------------------------------------------------------


def test_no_slots_need_no_bytes():
    assert lower_bound([], []) == 0


def test_one_slot():
    assert lower_bound([768], [(0, 0)]) == 768
    assert lower_bound([768], [(3, 9)]) == 768


def test_one_that_ends_at_p_and_one_that_starts_at_p_plus_1_never_meet():
    assert lower_bound([512, 256], [(0, 1), (2, 3)]) == 512
    assert lower_bound([256, 512], [(0, 1), (2, 3)]) == 512


def test_one_that_ends_at_p_and_one_that_starts_at_p_are_live_together():
    assert lower_bound([512, 256], [(0, 2), (2, 4)]) == 768


def test_a_slot_live_at_a_single_position_counts_there():
    assert lower_bound([100, 1000, 100], [(0, 4), (2, 2), (4, 6)]) == 1100


def test_nested_ranges_add_up():
    assert lower_bound([1024, 256, 512], [(0, 10), (3, 4), (4, 8)]) == 1792


def test_the_peak_may_come_late_and_is_not_the_total():
    sizes = [300, 200, 100, 400]
    ranges = [(0, 1), (1, 3), (3, 7), (6, 7)]
    # live bytes per position: 300 500 200 300 100 100 500 500
    assert lower_bound(sizes, ranges) == 500 < sum(sizes)


def test_positions_need_not_start_at_zero_nor_be_few():
    assert lower_bound([256, 256], [(40, 41), (41, 90)]) == 512
    assert lower_bound([256, 256], [(10**6, 10**6 + 5), (10**6 + 6, 10**6 + 7)]) == 256


def test_empty_slots_add_nothing():
    assert lower_bound([0, 0, 256], [(0, 3), (1, 2), (2, 2)]) == 256


def test_the_order_of_the_slots_does_not_matter():
    rng = random.Random(3)
    sizes = [rng.randrange(1, 50) * 256 for _ in range(30)]
    ranges = [tuple(sorted(rng.sample(range(20), 2))) for _ in range(30)]
    expected = lower_bound(sizes, ranges)
    for _ in range(5):
        order = list(range(30))
        rng.shuffle(order)
        assert lower_bound([sizes[i] for i in order], [ranges[i] for i in order]) == expected


@st.composite
def slots(draw, smallest=0):
    steps = draw(st.integers(1, 30))
    n = draw(st.integers(0, 25))
    sizes, ranges = [], []
    for _ in range(n):
        first = draw(st.integers(0, steps - 1))
        ranges.append((first, draw(st.integers(first, steps - 1))))
        sizes.append(256 * draw(st.integers(smallest, 32)))
    return sizes, ranges


@given(slots())
def test_it_is_the_peak_of_live_bytes_position_by_position(case):
    sizes, ranges = case
    assert lower_bound(sizes, ranges) == count(sizes, ranges)


@given(slots(smallest=1))  # (a pool block is never empty)
def test_no_layout_beats_it(case):
    """Every valid layout (no two slots live together share a byte) is at least as large."""
    sizes, ranges = case
    bound = lower_bound(sizes, ranges)
    planned = layout(sizes, ranges)
    check_layout(sizes, ranges, planned.offsets)
    assert max(sizes, default=0) <= bound <= planned.arena_bytes <= sum(sizes)
    stacked = [sum(sizes[:i]) for i in range(len(sizes))]  # nothing shared: also valid
    check_layout(sizes, ranges, stacked)
    assert bound <= sum(sizes)


# -- a compiled step ------------------------------------------------------------------------


def planned_cnn(recycle=True):
    """A compiled training step of SINGA's CNN on a planning device (offsets, no bytes)."""
    return planned_step("cnn", (8, 1, 28, 28), recycle=recycle)


def test_a_compiled_step_reports_the_peak_of_its_live_slots():
    step = planned_cnn()
    sizes = [s.nbytes for s in step.slots]
    ranges = [(s.first, s.last) for s in step.slots]
    summary = step.memory_summary()
    assert summary["arena_lower_bound_bytes"] == count(sizes, ranges) > 0
    assert summary["arena_lower_bound_bytes"] < sum(sizes)  # liveness: slots share memory
    assert summary["arena_bytes"] >= summary["arena_lower_bound_bytes"]


def test_without_recycling_the_bound_is_every_slot_at_once():
    step = planned_cnn(recycle=False)
    summary = step.memory_summary()
    assert summary["arena_lower_bound_bytes"] == sum(s.nbytes for s in step.slots)
    assert summary["arena_bytes"] == summary["arena_lower_bound_bytes"]
