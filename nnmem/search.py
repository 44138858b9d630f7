"""The one search nnmem needs in several places: the end of a prefix of candidates that fit.

Used for the deepest network or the largest batch within a memory budget (nnmem plan) and for
the longest list of kept tensors within a peak (cost-aware recomputation).
"""


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
