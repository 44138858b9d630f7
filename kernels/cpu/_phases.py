"""The layouts of kernels/cpu/conv3x3s2.py, its module docstring says why: an input's phase
planes (split), dy's planes in rows W2 apart (rows), and dx from its phase planes (merge).
Copies, memory-bound: parallel over the planes from PARALLEL_FROM elements of their source
(by_size), serial below."""

import numpy as np
from numba import prange

from ._jit import by_size

# Non-negative indices as unsigned: Numba then drops its negative-index wraparound, which
# blocks vectorisation (conv.py says more).
_u = np.uint64


def _split(phases, x, channel_major):
    """The four phase planes of each padded plane of x: phases[n, c, 2a+b] (channel_major:
    phases[c, 2a+b, n], each channel's phase planes of the chunk end to end) gets
    xpad[2r+a, 2s+b] at element r*W2 + s, zeros elsewhere."""
    nb, c, h, wd = x.shape
    w2 = (wd + 1) // 2 + 1
    for t in prange(nb * c):
        n, ci = t // c, t % c
        for k in range(4):
            a, b = k // 2, k % 2
            plane = phases[ci, k, n] if channel_major else phases[n, ci, k]
            for u in range(plane.size):
                plane[u] = 0
            # rows r with 0 <= 2r + a - 1 < H, columns s likewise: every other pixel of x (loops
            # with bounds, not breaks, so that the copy vectorises: measured 1.5x faster)
            for r in range(1 - a, (h - a) // 2 + 1):
                i = 2 * r + a - 1
                for s in range(1 - b, (wd - b) // 2 + 1):
                    plane[_u(r * w2 + s)] = x[n, ci, i, 2 * s + b - 1]


split = by_size(_split, on=1)


def _rows(planes, dy, w2):
    """Each plane of dy laid out in a plane of `planes` (N, O, plane): zeros, then dy[n, o]'s
    rows W2 apart from element W2 + 1, that is dy padded by a zero row above and a zero column
    to the left (conv3x3s2's backward data)."""
    nb, o, oh, ow = dy.shape
    for t in prange(nb * o):
        n, oi = t // o, t % o
        plane = planes[n, oi]
        for u in range(plane.size):
            plane[u] = 0
        for i in range(oh):
            row = w2 + 1 + i * w2
            for j in range(ow):
                plane[_u(row + j)] = dy[n, oi, i, j]


rows = by_size(_rows, on=1)


def _merge(dx, phases, w2):
    """dx from its four phase planes, split's inverse without the padding: dx[n, c, 2r+a-1,
    2s+b-1] = phases[2a+b, n, c, r*W2 + s] (conv3x3s2's backward data)."""
    nb, c, h, wd = dx.shape
    for t in prange(nb * c):
        n, ci = t // c, t % c
        for k in range(4):
            a, b = k // 2, k % 2
            plane = phases[k, n, ci]
            for r in range(1 - a, (h - a) // 2 + 1):
                i = 2 * r + a - 1
                for s in range(1 - b, (wd - b) // 2 + 1):
                    dx[n, ci, i, 2 * s + b - 1] = plane[_u(r * w2 + s)]


merge = by_size(_merge, on=0)
