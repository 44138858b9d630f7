"""The searches nnmem needs in several places: the end of a prefix of candidates that fit.

largest_fitting asks a yes-or-no question of each probe: the longest list of kept tensors
within a peak (cost-aware recomputation). largest_within asks each probe for a size and aims
the next probe where the sizes it has seen cross the limit: the deepest network or the largest
batch within a memory budget (nnmem plan), where every probe plans a whole training step.
"""

import math


def largest_fitting(fits, candidates):
    """The last of `candidates` (a sequence ordered by growing memory, e.g. depths or batch
    sizes) for which fits(candidate) holds, or None if the first does not fit. As memory grows
    with the candidates, the ones that fit are a prefix: probe the indices 1, 3, 7, 15, ...
    (capped at the last) until one fails, then bisect between the last success and that
    failure. That is O(log n) probes, most of them on small candidates, which plan fastest;
    the search ends at the last candidate, however large the budget."""
    if not candidates or not fits(candidates[0]):
        return None
    good, bad = 0, len(candidates)  # candidates[good] fits; none from candidates[bad] on does
    step, bisecting = 1, False
    while bad - good > 1:
        probe = (good + bad) // 2 if bisecting else min(good + step, bad - 1)
        if fits(candidates[probe]):
            good, step = probe, step * 2
        else:
            bad, bisecting = probe, True
    return candidates[good]


def largest_within(size_of, candidates, limit):
    """The last of `candidates` whose size, size_of(candidate), is at most `limit`, or None if
    the first's is larger. The sizes grow with the candidates (a network's peak with its depth,
    a step's with its batch), so the candidates within `limit` are a prefix, as for
    largest_fitting; size_of returns math.inf for a candidate known to exceed any limit.

    Interpolation search: the next probe is the last index at or below where the straight line
    through two probes reaches `limit`, the line through the last probe that fitted and the
    first that did not, or, while none has failed, through the largest two that fitted. Sizes
    that grow about linearly with the index take a handful of probes, whatever the limit; a
    line that reaches `limit` only beyond the last candidate sends the next probe there, and if
    it fits, the search is done. Below a candidate too large to measure, the next probe bisects.
    The guesses get log2(n) probes; largest_fitting ends the search in the bracket they leave,
    so that any growth takes O(log n) probes. No candidate is probed twice: every probe lies
    strictly between the last that fitted and the first that did not."""
    if not candidates:
        return None
    sizes = {}  # index -> size, of every probe so far

    def within(index):
        sizes[index] = size_of(candidates[index])
        return sizes[index] <= limit

    if not within(0):
        return None
    good, bad = 0, len(candidates)  # candidates[good] fits; none from candidates[bad] on does
    for _ in range(len(candidates).bit_length()):
        if bad - good <= 1:
            return candidates[good]
        index = min(max(_crossing(sizes, good, bad, limit), good + 1), bad - 1)
        if within(index):
            good = index
        else:
            bad = index
    rest = largest_fitting(lambda c: size_of(c) <= limit, candidates[good + 1 : bad])
    return candidates[good] if rest is None else rest


def _crossing(sizes, good, bad, limit):
    """Where the line through two probes reaches `limit`, rounded down to an index: through
    the probes at `good` and `bad` when `bad` was probed (interpolation), else through the
    largest two probes that fitted (extrapolation). When `bad` has no size (math.inf: too large
    to measure), the middle of the bracket (bisection); without two probes that grow, the next
    galloping index of largest_fitting, 2 * good + 1."""
    if bad in sizes:
        if sizes[bad] == math.inf:
            return (good + bad) // 2
        low, high = good, bad
    else:
        below = [i for i in sizes if i < good]
        if not below or sizes[good] <= sizes[max(below)]:
            return 2 * good + 1
        low, high = max(below), good
    return good + int((limit - sizes[good]) * (high - low) // (sizes[high] - sizes[low]))
