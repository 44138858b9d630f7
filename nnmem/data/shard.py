"""Each rank's part of a data set, for data-parallel training (nnmem.dist_opt)."""

from __future__ import annotations

__all__ = ["shard"]


def shard(arrays, rank: int, world_size: int):
    """Rank `rank`'s part of each array in `arrays` (a list or tuple of arrays with the same
    first dimension, e.g. (x_train, y_train)): the rank-th of `world_size` equal contiguous
    parts of N // world_size samples each, as SINGA's examples partition (the last
    N % world_size samples are left out). Equal parts matter: every rank must run the same
    number of steps, or the ranks that run more wait for ever in a collective the others never
    join (DistOpt stops them after its timeout). Returns views, in the order given."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("shard: give the arrays to split, e.g. shard((x, y), rank, world_size)")
    if not (isinstance(world_size, int) and world_size >= 1):
        raise ValueError(f"shard: world_size must be a whole number >= 1, got {world_size!r}")
    if not (isinstance(rank, int) and 0 <= rank < world_size):
        raise ValueError(f"shard: rank must be in 0..{world_size - 1}, got {rank!r}")
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError(f"shard: the arrays have different lengths {[len(a) for a in arrays]}")
    each = n // world_size
    if each == 0:
        raise ValueError(f"shard: {n} samples cannot give each of {world_size} ranks one")
    return tuple(a[rank * each : (rank + 1) * each] for a in arrays)
