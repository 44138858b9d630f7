"""The arena layout (the static allocation plan): an offset for every slot of a recorded
step, fixed once.

Input: each slot's size and live range [first, last] (positions in the replay order).
Output: a Layout: offsets such that two slots whose live ranges overlap never overlap in
memory, and the arena size (the largest offset + size). A layout is a pure function of sizes
and ranges, so it is tested without any device.

The lower bound LB = max over positions of the bytes live at that position: no layout can use
less (and finding the best layout is NP-hard in general: it is dynamic storage allocation).
The placement is greedy (as in TensorFlow Lite's arena planner): take the slots in some
order, and put each at the smallest gap between already placed slots whose live ranges
overlap its own (best fit), or above them all. Several orders are tried and the smallest arena
kept: largest first ("greedy by size"), longest-lived first, by start position then size
("greedy by breadth"), largest bytes x positions first (the slots that block the most of
the memory-time plane placed while it is still empty), "peak first" (below), and, for graphs
small enough to afford it, a few seeded shuffles of the largest-first order within power-of-two
size classes (sizes of one class can be swapped almost freely, and which of them goes first
decides which gaps are left).

Peak first. A layout at the lower bound must stack the slots live at the peak position
exactly, one on another, from 0 to LB. The size-led orders can leave a gap there that no later
slot fills (the fused ResNet-20 at batch 32: 143 KiB above LB with the four orders above and
2,000 shuffles). So two orders place those slots first -- latest-ending lowest, or longest-lived
lowest, so the slots that outlive the peak sit under those that end with it -- and then the
rest largest first, into the gaps left above and beside them. A step can have several positions
near its peak, where a gap costs as much: the same two orders are tried at the next highest
positions too, up to PEAKS of them, where the placement budget of the shuffles allows
(DenseNet on MNIST at batch 64: 122 KiB above LB with the highest position alone, at LB with
the second).

Greedy placement compares every slot with every placed one: quadratic. Past
GREEDY_LIMIT slots (deep networks: a 10,000-layer ResNet has tens of thousands) the layout
is made by simulation instead, as MXNet does: walk the positions once, free each slot after its
last position and allocate each new one with the pool's own best-fit allocator (a pool has no
bytes of its own); the arena is the simulation's high-water mark. O(n log n).
"""

import math
import random
from typing import NamedTuple

from nnmem.memory.pool import Pool
from nnmem.memory.units import aligned_size

#: Placement work allowed for the shuffled restarts, in (slot x slot) comparisons.
RESTART_BUDGET = 2_000_000
MAX_RESTARTS = 64
#: Positions the peak-first orders stack at, at most: the highest and the next highest.
PEAKS = 4
#: Above this many slots, lay out by simulating the allocator instead of greedy placement.
GREEDY_LIMIT = 1500


class Layout(NamedTuple):
    offsets: list  # per slot, bytes from the start of the arena
    arena_bytes: int  # bytes the layout needs
    lower_bound: int  # max over positions of live bytes


def lower_bound(sizes, ranges):
    """The peak of live bytes over the schedule: no layout of these slots uses less.

    LB = max over positions p of  sum of sizes[i] for every i with first_i <= p <= last_i

    where ranges[i] = (first_i, last_i) are the first and last positions (inclusive) at which
    slot i is live. Two slots overlap in time when one's range contains a position of
    the other's; one that ends at p and one that starts at p + 1 never do. No slots: 0.
    Sorting 2n events (+size at first_i, -size at last_i + 1) and sweeping them costs
    O(n log n), whatever the positions' span.
    """
    events = []
    for size, (first, last) in zip(sizes, ranges):
        events.append((first, size))
        events.append((last + 1, -size))
    events.sort()
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def peak_positions(sizes, ranges, count):
    """Up to `count` positions, the most live bytes first (ties: earliest; the first holds
    LB): of the positions where a slot starts or ends, each with the bytes live there once
    all of its events are in. lower_bound's sweep, which stays whole on its own (exercise
    03_lower_bound blanks it out, and layout's bound must then be the learner's)."""
    events = sorted(
        event for size, (first, last) in zip(sizes, ranges)
        for event in ((first, size), (last + 1, -size))
    )  # fmt: skip
    live, at = 0, []
    for k, (p, delta) in enumerate(events):
        live += delta
        if k + 1 == len(events) or events[k + 1][0] != p:
            at.append((-live, p))
    return [p for _, p in sorted(at)[:count]]


def layout(sizes, ranges, seed=0, alignment=256):
    """The smallest of the greedy layouts over several placement orders (or, past
    GREEDY_LIMIT slots, the simulated allocator's); returns a Layout.
    Deterministic: the same sizes and ranges always give the same offsets."""
    bound = lower_bound(sizes, ranges)
    if len(sizes) > GREEDY_LIMIT:
        offsets, arena = simulate(sizes, ranges, alignment)
        return Layout(offsets, arena, bound)
    n = range(len(sizes))
    orders = [
        sorted(n, key=lambda i: (-sizes[i], ranges[i][0], i)),  # by size
        sorted(n, key=lambda i: (ranges[i][0] - ranges[i][1], -sizes[i], i)),  # longest
        sorted(n, key=lambda i: (ranges[i][0], -sizes[i], i)),  # breadth
        sorted(n, key=lambda i: (-sizes[i] * (ranges[i][1] - ranges[i][0] + 1), i)),  # area
    ]
    restarts = min(MAX_RESTARTS, RESTART_BUDGET // max(len(sizes) ** 2, 1))
    # the highest position, and the next ones where the budget allows
    for peak in peak_positions(sizes, ranges, 1 + min(PEAKS - 1, restarts)):
        at_peak = [i for i in n if ranges[i][0] <= peak <= ranges[i][1]]
        rest = [i for i in orders[0] if not ranges[i][0] <= peak <= ranges[i][1]]  # by size
        for key in (
            lambda i: (-ranges[i][1], ranges[i][0], i),  # ends latest lowest
            lambda i: (ranges[i][0] - ranges[i][1], i),  # longest-lived lowest
        ):
            orders.append(sorted(at_peak, key=key) + rest)
    rng = random.Random(seed)
    for _ in range(restarts):
        shuffled = list(n)
        rng.shuffle(shuffled)
        orders.append(sorted(shuffled, key=lambda i: -math.floor(math.log2(max(sizes[i], 1)))))
    best = None
    for order in orders:
        placed = _place(sizes, ranges, order)
        if best is None or placed[1] < best[1]:
            best = placed
        if best[1] == bound:  # cannot do better than the lower bound
            break
    offsets, arena = best if best is not None else ([], 0)
    return Layout(offsets, arena, bound)


def simulate(sizes, ranges, alignment=256):
    """(offsets, arena bytes) from a best-fit allocator run over the positions: at each
    position free the slots whose last position has passed, then allocate those that start
    (largest first)."""
    # Offsets only, no bytes. The pool rounds every request up to the alignment; with room for
    # every slot at once, rounded, it never runs out: its free top is always large enough.
    room = sum(aligned_size(size, alignment) for size in sizes)
    pool = Pool(max(room, alignment), alignment=alignment)
    starts, ends = {}, {}
    for i, (first, last) in enumerate(ranges):
        starts.setdefault(first, []).append(i)
        ends.setdefault(last + 1, []).append(i)
    offsets = [0] * len(sizes)
    for position in sorted(set(starts) | set(ends)):
        for i in ends.get(position, ()):
            pool.free(offsets[i])
        for i in sorted(starts.get(position, ()), key=lambda i: -sizes[i]):
            offsets[i] = pool.alloc(sizes[i])
    return offsets, pool.stats()["high_water_bytes"]


def _place(sizes, ranges, order):
    """Best-fit placement of the slots in `order`: (offsets, arena bytes)."""
    placed = []  # (offset, size, first, last)
    offsets = [0] * len(sizes)
    for i in order:
        size, (first, last) = sizes[i], ranges[i]
        overlapping = sorted(
            (o, s)
            for o, s, other_first, other_last in placed
            if other_first <= last and first <= other_last
        )
        best_offset, best_gap, end = None, None, 0
        for o, s in overlapping:
            gap = o - end
            if gap >= size and (best_gap is None or gap < best_gap):
                best_offset, best_gap = end, gap
            end = max(end, o + s)
        offsets[i] = end if best_offset is None else best_offset
        placed.append((offsets[i], size, first, last))
    return offsets, max((o + s for o, s, _, _ in placed), default=0)


def check_layout(sizes, ranges, offsets):
    """Raise if two slots that are live at the same time overlap in memory."""
    items = sorted(range(len(sizes)), key=lambda i: offsets[i])
    for a_pos, a in enumerate(items):
        for b in items[a_pos + 1 :]:
            if offsets[b] >= offsets[a] + sizes[a]:
                break
            if ranges[a][0] <= ranges[b][1] and ranges[b][0] <= ranges[a][1]:
                raise AssertionError(f"slots {a} and {b} are live together and overlap")
