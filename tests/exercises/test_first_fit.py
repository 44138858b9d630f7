"""Exercise 1 (tutorial 00): the pool's first fit, nnmem/memory/pool.py:first_fit.

`first_fit(free_offsets, free_size, size)` is the offset of the lowest-addressed free segment
of at least `size` bytes, or None. The tests call it on hand-made free lists, check it against
a one-line model on random ones, and then drive a first-fit Pool, whose every allocation must
land where the model says (exercises/00_first_fit.md)."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnmem.memory.errors import OutOfMemory
from nnmem.memory.pool import ALIGNMENT, Pool, first_fit

pytestmark = pytest.mark.exercise_pool

A = ALIGNMENT


def free_list(*segments):
    """(free_offsets, free_size) as the pool keeps them, from (offset, size) pairs."""
    return sorted(offset for offset, _ in segments), dict(segments)


def model(segments, size):
    """The contract in one line: the smallest offset among the segments that fit."""
    return min((offset for offset, length in segments if length >= size), default=None)


# -- the function itself --------------------------------------------------------------------


def test_no_free_segment_gives_none():
    assert first_fit([], {}, A) is None


def test_one_segment_that_fits():
    assert first_fit(*free_list((512, 4 * A)), A) == 512


def test_a_segment_of_exactly_the_size_fits():
    assert first_fit(*free_list((0, A), (4 * A, 2 * A)), A) == 0
    assert first_fit(*free_list((0, A), (4 * A, 2 * A)), 2 * A) == 4 * A


def test_nothing_fits_gives_none():
    assert first_fit(*free_list((0, A), (4 * A, 2 * A)), 3 * A) is None


def test_the_lowest_address_wins_over_the_snuggest_segment():
    # best fit would take the exact 1-block segment at 8A; first fit takes the big one at 0
    assert first_fit(*free_list((0, 6 * A), (8 * A, A)), A) == 0


def test_segments_too_small_are_skipped():
    offsets, sizes = free_list((0, A), (2 * A, A), (4 * A, 3 * A), (9 * A, 5 * A))
    assert first_fit(offsets, sizes, 2 * A) == 4 * A
    assert first_fit(offsets, sizes, 4 * A) == 9 * A


def test_the_address_order_counts_not_the_order_the_sizes_were_stored_in():
    # the pool's dict of sizes is in insertion order, which coalescing makes differ from the
    # address order: only free_offsets is sorted by address
    sizes = {10 * A: 4 * A, 3 * A: 4 * A, 0: A}
    assert first_fit(sorted(sizes), sizes, 2 * A) == 3 * A


def test_the_answer_is_a_free_segment_start_never_an_offset_inside_one():
    offsets, sizes = free_list((A, 8 * A))
    assert first_fit(offsets, sizes, 2 * A) == A


def test_it_does_not_change_the_free_list():
    offsets, sizes = free_list((0, A), (4 * A, 2 * A))
    first_fit(offsets, sizes, 2 * A)
    assert (offsets, sizes) == free_list((0, A), (4 * A, 2 * A))


@given(
    lengths=st.lists(st.integers(1, 12), min_size=0, max_size=12),
    gaps=st.lists(st.integers(1, 4), min_size=12, max_size=12),
    size=st.integers(1, 14),
    insertion=st.randoms(use_true_random=False),
)
def test_it_agrees_with_the_model_on_random_free_lists(lengths, gaps, size, insertion):
    segments, end = [], 0
    for length, gap in zip(lengths, gaps):
        segments.append((end + gap * A, length * A))  # a live block between free segments
        end += gap * A + length * A
    stored = list(segments)
    insertion.shuffle(stored)  # the size table in some other order
    offsets, sizes = sorted(o for o, _ in segments), dict(stored)
    assert first_fit(offsets, sizes, size * A) == model(segments, size * A)


# -- through the pool -----------------------------------------------------------------------


def free_segments(pool):
    return [(offset, size) for offset, size, is_free in pool.segments() if is_free]


def test_a_first_fit_pool_takes_the_low_hole_where_best_fit_takes_the_snug_one():
    placed = {}
    for policy in ("first_fit", "best_fit"):
        pool = Pool(16 * A, policy=policy)
        a, b, c, d = (pool.alloc(n * A) for n in (3, 1, 1, 2))
        pool.free(a)  # a hole of 3 blocks at 0
        pool.free(c)  # a hole of 1 block at 4A
        placed[policy] = pool.alloc(A)
    assert placed == {"first_fit": 0, "best_fit": 4 * A}


def test_a_first_fit_pool_raises_out_of_memory_when_nothing_fits():
    pool = Pool(4 * A, policy="first_fit")
    first = pool.alloc(A)
    pool.alloc(A)
    pool.free(first)  # free: [0, A) and [2A, 4A), 3 blocks in all but at most 2 together
    with pytest.raises(OutOfMemory):
        pool.alloc(3 * A)
    assert pool.alloc(2 * A) == 2 * A


def test_every_allocation_of_a_first_fit_pool_lands_where_the_model_says():
    """Random allocations and frees: each block goes to the model's choice on the free list
    just before it (the pool's own segments(), which do not use first_fit), and the live
    blocks never overlap."""
    rng = random.Random(13)
    pool = Pool(64 * A, policy="first_fit")
    live = {}
    for _ in range(400):
        if live and rng.random() < 0.45:
            offset = rng.choice(sorted(live))
            pool.free(offset)
            del live[offset]
            continue
        nbytes = rng.choice([1, A, A + 1, 2 * A, 3 * A - 7, 5 * A, 9 * A])
        need = -(-nbytes // A) * A
        want = model(free_segments(pool), need)
        if want is None:
            with pytest.raises(OutOfMemory):
                pool.alloc(nbytes)
            continue
        offset = pool.alloc(nbytes)
        assert offset == want
        live[offset] = need
    spans = sorted(live.items())
    for (o1, s1), (o2, _) in zip(spans, spans[1:]):
        assert o1 + s1 <= o2
