"""Embedding lookup: rows of a table picked by integer ids, and the gradient of the table.

    forward:   y[i, :] = w[ids[i], :]                      (ids: int32, any count)
    backward:  dw[r, :] = sum over i with ids[i] == r of dy[i, :]

The backward is a scatter-add with repeats (a word used twice gets both gradients). To stay
deterministic without atomics, each feature column f is owned by one loop iteration, which
walks the ids in order: dw[ids[0], f] += dy[0, f], then ids[1], ... (parallel over columns,
a fixed order within each). An id outside [0, rows) raises: it would read or write outside
the table. No allocation.
"""

from numba import prange

from ._jit import njit


def _check_ids(ids, rows):
    for i in range(ids.size):
        if ids[i] < 0 or ids[i] >= rows:
            raise IndexError("embedding: an id is outside the table (0 <= id < rows)")


check_ids = njit(cache=True)(_check_ids)


def _embedding_forward(y, ids, w):
    """y (N, F) = w[ids] for ids (N,) int32 and w (V, F). Writes y."""
    if y.shape[0] != ids.size or y.shape[1] != w.shape[1]:
        raise ValueError("embedding_forward: y must have shape (ids.size, w.shape[1])")
    check_ids(ids, w.shape[0])
    for i in prange(ids.size):
        r = ids[i]
        for f in range(w.shape[1]):
            y[i, f] = w[r, f]


def _embedding_backward(dw, dy, ids):
    """dw (V, F) = the rows of dy (N, F) summed by id. Overwrites dw."""
    if dy.shape[0] != ids.size or dy.shape[1] != dw.shape[1]:
        raise ValueError("embedding_backward: dy must have shape (ids.size, dw.shape[1])")
    check_ids(ids, dw.shape[0])
    for f in prange(dw.shape[1]):
        for r in range(dw.shape[0]):
            dw[r, f] = 0
        for i in range(ids.size):
            dw[ids[i], f] += dy[i, f]


embedding_forward = njit(cache=True)(_embedding_forward)
embedding_backward = njit(cache=True)(_embedding_backward)
