"""Unit tests for nnmem.memory.pool.Pool and nnmem.memory.errors."""

import gc
import pickle
import random
import weakref

import numpy as np
import pytest

from nnmem.memory.errors import OutOfMemory, format_bytes
from nnmem.memory.pool import ALIGNMENT, Pool
from nnmem.memory.storage import HostStorage, NoStorage
from nnmem.memory.units import parse_bytes

A = ALIGNMENT


class Owner:
    """A stand-in for nnmem's Block: weak-referenceable, with a descriptive __str__."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


def check_layout(pool):
    """The structural invariants: exact tiling, alignment, no adjacent free segments."""
    segs = pool.segments()
    pos = 0
    for off, size, _ in segs:
        assert off == pos and size > 0 and off % pool.alignment == 0 and size % pool.alignment == 0
        pos += size
    assert pos == pool.capacity
    assert not any(a[2] and b[2] for a, b in zip(segs, segs[1:]))


# -- construction -------------------------------------------------------------


def test_arena_base_and_capacity_are_aligned():
    pool = Pool(10 * A + 100)
    assert pool.capacity == 10 * A  # rounded down
    storage = HostStorage(pool.capacity, A)
    assert storage.buffer.dtype == np.uint8 and storage.buffer.nbytes == pool.capacity
    assert storage.address % A == 0 == storage.buffer.ctypes.data % A
    assert pool.segments() == [(0, 10 * A, True)]
    assert HostStorage(1 << 20, 4096).address % 4096 == 0


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(capacity=A - 1), ["capacity", "alignment", str(A)]),
        (dict(capacity=0), ["capacity"]),
        (dict(capacity=4 * A, policy="worst_fit"), ["worst_fit", "best_fit", "first_fit"]),
        (dict(capacity=4 * A, alignment=100), ["power of two"]),
        (dict(capacity=4 * A, alignment=0), ["power of two"]),
    ],
)
def test_bad_constructor_arguments(kwargs, words):
    with pytest.raises(ValueError) as info:
        Pool(**kwargs)
    for w in words:
        assert w in str(info.value)


# -- alloc / free ---------------------------------------------------------------


def test_offsets_and_sizes_are_aligned():
    pool = Pool(64 * A)
    storage = HostStorage(pool.capacity, A)
    for n in [0, 1, A - 1, A, A + 1, 3 * A + 7]:
        off = pool.alloc(n)
        assert off % A == 0
        assert pool.size_of(off) == max(A, -(-n // A) * A)
        assert storage.view(off, n).ctypes.data % A == 0
    check_layout(pool)


def test_negative_request_rejected():
    with pytest.raises(ValueError, match="negative"):
        Pool(4 * A).alloc(-1)


def test_a_view_is_a_window_on_the_storage_and_the_pool_checks_its_range():
    pool = Pool(8 * A)
    storage = HostStorage(pool.capacity, A)
    a = pool.alloc(10)
    b = pool.alloc(A)
    pool.check_range(a, 10)
    va = storage.view(a, 10)
    assert va.dtype == np.uint8 and va.shape == (10,) and np.shares_memory(va, storage.buffer)
    va[:] = 7
    storage.view(b, A)[:] = 9
    assert (storage.buffer[a : a + 10] == 7).all() and (storage.buffer[b : b + A] == 9).all()
    assert storage.view(a, 0).size == 0
    pool.check_range(b + 16, 16, within=b)  # a planned tensor inside an arena block
    with pytest.raises(ValueError, match="do not fit"):
        pool.check_range(a, A + 1)  # larger than the block
    with pytest.raises(ValueError, match="do not fit"):
        pool.check_range(b + A - 8, 16, within=b)  # runs past the arena block
    with pytest.raises(ValueError, match="not a live block"):
        pool.check_range(3 * A, 1)  # not a live block


def test_a_planning_storage_has_no_bytes():
    with pytest.raises(ValueError, match="planning device has no bytes"):
        NoStorage(4 * A).view(0, 1)


def _fragment(policy):
    """Layout: [x 1A][free 3A][y 1A][free 2A][z 1A][free 2A]: holes at A, 5A and 8A."""
    pool = Pool(10 * A, policy=policy)
    x, g1, y, g2, z = (pool.alloc(n * A) for n in (1, 3, 1, 2, 1))
    pool.free(g1)
    pool.free(g2)
    assert [s for s in pool.segments() if s[2]] == [
        (A, 3 * A, True),
        (5 * A, 2 * A, True),
        (8 * A, 2 * A, True),
    ]
    return pool


def test_best_fit_and_first_fit_pick_different_segments():
    best, first = _fragment("best_fit"), _fragment("first_fit")
    assert best.alloc(2 * A) == 5 * A  # the smallest hole that fits; tie 5A vs 8A -> lowest
    assert first.alloc(2 * A) == A  # the lowest hole that fits, split
    check_layout(best)
    check_layout(first)
    assert best.stats()["largest_free_block"] == 3 * A
    assert first.stats()["largest_free_block"] == 2 * A


def test_split_then_coalesce_middle_then_neighbours():
    pool = Pool(8 * A)
    a, b, c = pool.alloc(A), pool.alloc(2 * A), pool.alloc(A)
    assert (a, b, c) == (0, A, 3 * A)
    assert pool.segments() == [
        (0, A, False),
        (A, 2 * A, False),
        (3 * A, A, False),
        (4 * A, 4 * A, True),
    ]
    pool.free(b)  # middle: no free neighbour
    assert pool.stats()["free_segments"] == 2
    pool.free(a)  # merges with the right neighbour (b's hole)
    assert pool.segments()[0] == (0, 3 * A, True)
    pool.free(c)  # merges with both neighbours: one segment again
    assert pool.segments() == [(0, 8 * A, True)]
    assert pool.stats()["largest_free_block"] == 8 * A


def test_many_blocks_freed_in_random_order_coalesce_to_one_segment():
    pool = Pool(2000 * A, policy="first_fit")
    rng = random.Random(0)
    offsets = [pool.alloc(rng.randint(1, 3 * A)) for _ in range(700)]
    rng.shuffle(offsets)
    for i, off in enumerate(offsets):
        pool.free(off)
        if i % 97 == 0:
            check_layout(pool)
    assert pool.segments() == [(0, pool.capacity, True)]


def test_double_free_and_unknown_offset():
    pool = Pool(8 * A)
    a = pool.alloc(A)
    b = pool.alloc(2 * A)
    pool.free(a)
    with pytest.raises(ValueError, match=rf"offset {a}\b.*double free"):
        pool.free(a)
    with pytest.raises(ValueError, match=rf"offset {b + A}\b.*not at its start"):
        pool.free(b + A)
    with pytest.raises(ValueError, match=rf"offset {100 * A}\b.*outside"):
        pool.free(100 * A)
    with pytest.raises(ValueError, match=rf"offset {a}\b"):
        pool.size_of(a)
    assert pool.stats()["num_frees"] == 1  # failed frees change nothing
    check_layout(pool)


# -- statistics -------------------------------------------------------------------


def test_stats_after_a_sequence():
    pool = Pool(16 * A + 5)
    a = pool.alloc(10)
    b = pool.alloc(A + 1)
    c = pool.alloc(3 * A)
    pool.free(b)
    s = pool.stats()
    assert s == {
        "allocated_bytes.current": A + 3 * A,
        "allocated_bytes.peak": A + 2 * A + 3 * A,
        "high_water_bytes": A + 2 * A + 3 * A,
        "requested_bytes.current": 10 + 3 * A,
        "reserved_bytes": 16 * A,
        "budget_bytes": None,
        "free_bytes": 12 * A,
        "largest_free_block": 10 * A,
        "num_allocs": 3,
        "num_frees": 1,
        "active_blocks": 2,
        "free_segments": 2,
    }
    pool.free(a)
    pool.free(c)
    s = pool.stats()
    assert s["allocated_bytes.current"] == 0 and s["requested_bytes.current"] == 0
    assert s["free_segments"] == 1 and s["active_blocks"] == 0
    assert s["num_allocs"] - s["num_frees"] == s["active_blocks"]


def test_peak_and_reset_peak():
    pool = Pool(16 * A)
    a = pool.alloc(4 * A)
    b = pool.alloc(4 * A)
    pool.free(b)
    assert pool.stats()["allocated_bytes.peak"] == 8 * A
    pool.reset_peak()
    assert pool.stats()["allocated_bytes.peak"] == 4 * A
    c = pool.alloc(2 * A)
    assert pool.stats()["allocated_bytes.peak"] == 6 * A
    pool.free(a)
    pool.free(c)
    pool.reset_peak()
    assert pool.stats()["allocated_bytes.peak"] == 0


def test_live_blocks_sorted_by_size_with_owners():
    pool = Pool(16 * A)
    small, big = Owner("small"), Owner("big")
    pool.alloc(A, owner=small)
    pool.alloc(4 * A, owner=big)
    pool.alloc(2 * A, owner="a string owner")
    pool.alloc(2 * A)
    assert pool.live_blocks() == [
        (A, 4 * A, big),
        (5 * A, 2 * A, "a string owner"),
        (7 * A, 2 * A, None),
        (0, A, small),
    ]


def test_owner_is_held_weakly():
    pool = Pool(8 * A)
    owner = Owner("conv1 Conv2d output (64,20,24,24) float32")
    probe = weakref.ref(owner)
    off = pool.alloc(A, owner=owner)
    assert pool.live_blocks()[0][2] is owner
    del owner
    gc.collect()
    assert probe() is None  # the pool did not keep it alive
    assert pool.live_blocks() == [(off, A, None)]  # the block stays live until freed
    pool.free(off)


# -- out of memory ----------------------------------------------------------------


def test_out_of_memory_message_names_request_free_space_and_owners():
    pool = Pool(8 * A)
    o1 = Owner("conv1 Conv2d output (64,20,24,24) float32")
    o2 = Owner("fc1 Linear weight (500,800) float32")
    pool.alloc(4 * A, owner=o1)
    pool.alloc(2 * A + 3, owner=o2)
    with pytest.raises(OutOfMemory) as info:
        pool.alloc(3 * A, owner=Owner("never allocated"))
    e = info.value
    assert isinstance(e, MemoryError)
    assert (e.request, e.nbytes, e.free_bytes, e.largest_free_block, e.capacity) == (
        3 * A,
        3 * A,
        A,
        A,
        8 * A,
    )
    assert e.live == [(0, 4 * A, str(o1)), (4 * A, 3 * A, str(o2))]
    msg = str(e)
    for text in [
        format_bytes(3 * A),
        str(3 * A),
        format_bytes(A),
        str(o1),
        str(o2),
        "pool_bytes",
        "smaller batch",
    ]:
        assert text in msg
    assert "fragmented" not in msg and not e.fragmented
    assert pool.stats()["num_allocs"] == 2  # a failed alloc changes nothing
    check_layout(pool)


def test_out_of_memory_fragmentation_hint():
    pool = Pool(6 * A)
    blocks = [pool.alloc(A + 1) for _ in range(3)]  # three 2A blocks (A+1 rounds up)
    pool.free(blocks[0])
    pool.free(blocks[2])
    with pytest.raises(OutOfMemory) as info:
        pool.alloc(3 * A + 5)
    e = info.value
    assert (
        e.request == 4 * A
        and e.nbytes == 3 * A + 5
        and e.free_bytes == 4 * A
        and e.largest_free_block == 2 * A
    )
    assert e.fragmented and "fragmented" in str(e)
    assert str(3 * A + 5) in str(e)  # the unrounded request is also shown


def test_out_of_memory_larger_than_pool_and_pickles():
    pool = Pool(4 * A)
    with pytest.raises(OutOfMemory, match="larger than the whole pool") as info:
        pool.alloc(1 << 30)
    e2 = pickle.loads(pickle.dumps(info.value))
    assert str(e2) == str(info.value) and e2.request == info.value.request


def test_out_of_memory_lists_at_most_ten_blocks_and_survives_bad_str():
    class BadStr:
        def __str__(self):
            raise RuntimeError("boom")

    pool = Pool(12 * A)
    bad = BadStr()
    pool.alloc(A, owner=bad)
    pool.alloc(A, owner=Owner("dies at once"))  # its weakref is dead by the time of the report
    keep = [Owner(f"block{i}") for i in range(10)]
    for o in keep:
        pool.alloc(A, owner=o)
    with pytest.raises(OutOfMemory) as info:
        pool.alloc(1)
    e = info.value
    assert len(e.live) == 10 and "block7" in str(e) and "block8" not in str(e)
    assert "BadStr with a failing __str__" in str(e)
    assert "garbage-collected" in str(e)


def test_format_bytes():
    assert format_bytes(0) == "0 B"
    assert format_bytes(512) == "512 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1024) == "1.0 KiB"
    assert format_bytes(int(3.5 * 2**20)) == "3.5 MiB"
    assert format_bytes(2**20 - 1) == "1.0 MiB"  # not "1024.0 KiB"
    assert format_bytes(5 * 2**30) == "5.0 GiB"
    assert format_bytes(-2048) == "-2.0 KiB"


def test_a_size_is_a_whole_number_of_bytes():
    """1.5 became 1 byte; 1e20 (a float) was refused as text; a whole float is its int."""
    assert parse_bytes(1e9) == 10**9 and parse_bytes(1e20) == 10**20
    for bad in (1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="whole number"):
            parse_bytes(bad)


@pytest.mark.parametrize("n", [512, 3 * 2**20, 5 * 2**30, 7 * 2**40, 2 * 2**50])
def test_a_printed_size_reads_back(n):
    """What format_bytes prints (PiB included), parse_bytes takes: a size from a report can
    be given back as a flag."""
    assert parse_bytes(format_bytes(n).replace(" ", "")) == n


def test_large_idle_arena_is_cheap():
    # 256 MiB of address space; np.empty does not touch the pages, so this is instant.
    pool = Pool(256 << 20)
    off = pool.alloc(100)
    HostStorage(pool.capacity, A).view(off, 100)[:] = 1
    pool.free(off)
    assert pool.stats()["free_segments"] == 1
