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
    xpad[2r+a, 2s+b] at element r*W2 + s, zeros elsewhere. Row by row of x: row i is row
    (i+1)//2 of the phases a = (i+1) % 2, its even columns 2m column m of phase b = 1, its odd
    columns 2m+1 column m+1 of phase b = 0: one read of each row, two contiguous writes, where
    a loop over each phase's every other pixel read x four times with a stride. Split and merge
    on ResNet-20's stride-2 layers at batch 32 (2-core AMD EPYC): 0.121 against 0.196 ms
    (16 channels of 32x32), 0.109 against 0.142 (32 of 16x16); on rows of 3 pixels the rows'
    loops cost more than they save (0.85 against 0.69 ms on 700 x 40 planes of 5x3)."""
    nb, c, h, wd = x.shape
    w2 = (wd + 1) // 2 + 1
    for t in prange(nb * c):
        n, ci = t // c, t % c
        for k in range(4):
            plane = phases[ci, k, n] if channel_major else phases[n, ci, k]
            for u in range(plane.size):
                plane[u] = 0
        for i in range(h):
            a = (i + 1) % 2
            even = phases[ci, 2 * a + 1, n] if channel_major else phases[n, ci, 2 * a + 1]
            odd = phases[ci, 2 * a, n] if channel_major else phases[n, ci, 2 * a]
            base = (i + 1) // 2 * w2
            for m in range(wd // 2):
                even[_u(base + m)] = x[n, ci, i, 2 * m]
                odd[_u(base + m + 1)] = x[n, ci, i, 2 * m + 1]
            if wd % 2:
                even[_u(base + wd // 2)] = x[n, ci, i, wd - 1]


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
    2s+b-1] = phases[2a+b, n, c, r*W2 + s] (conv3x3s2's backward data). Row by row of dx, as
    split reads x."""
    nb, c, h, wd = dx.shape
    for t in prange(nb * c):
        n, ci = t // c, t % c
        for i in range(h):
            a = (i + 1) % 2
            even, odd = phases[2 * a + 1, n, ci], phases[2 * a, n, ci]
            base = (i + 1) // 2 * w2
            for m in range(wd // 2):
                dx[n, ci, i, 2 * m] = even[_u(base + m)]
                dx[n, ci, i, 2 * m + 1] = odd[_u(base + m + 1)]
            if wd % 2:
                dx[n, ci, i, wd - 1] = even[_u(base + wd // 2)]


merge = by_size(_merge, on=0)
