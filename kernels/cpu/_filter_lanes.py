"""Backward filter of the 3x3 convolutions with the filters in the vector's lanes.

    dw[o, c, p, q] = sum_{n, i, j} dy[n, o, i, j] * input[n, c, tap_pq(i, j)]

where the input is conv3x3's padded planes (tap (p, q) of output pixel (i, j) at element
(i+p)*W2 + j+q, W2 = W + 2) or conv3x3s2's four phase planes (phase 2*(p%2) + q%2 at element
(i + p//2)*W2 + j + q//2, W2 = OW + 1).

Why the filters in the lanes. Summed over the pixels in a vector (nine sums of a filter, each a
vector of pixels), each vector multiply-add needs a vector read of the input shifted by the
tap, which crosses a cache line at 8 of 9 taps, and each sum ends in a sum across its lanes.
Here dy is transposed first (dyt: a row of O filters per pixel) and a task keeps, for one
vector of filters and three input channels (CHANNELS; one with AVX2), the 27 sums (3 channels
x 9 taps) in vector registers over the pixels: per pixel one vector read of dy's row feeds 27
multiply-adds whose other factor is one input element broadcast to every lane, read by the
multiply-add itself (AVX-512's embedded broadcast). The lanes never meet, so no sum crosses
lanes. Measured on a 2-core machine in one process against the loop it replaced, the two
called in turn (the median of 150 calls of the whole pass, its copies included), ResNet-20's
shapes at batch 32, two runs: 1.04-1.16x (16 channels of 32x32, where the copies and the
memory traffic weigh most), 1.45-1.46x (32 of 16x16), 1.75-1.77x (64 of 8x8), 1.24-1.33x with
stride 2; one compiled training step, the two switched step by step: ResNet-20 1.12x,
ResNet-56 1.12x, DenseNet 1.06x. Compiled for AVX2 (NUMBA_CPU_NAME=haswell, the same
machine), one channel a loop: 1.41-2.12x the earlier loop there; three channels a loop
spilled registers (0.92-1.39x).

Groups and order. The samples are summed in groups of `group` (kernels/sizes.py,
conv3x3_filter_sample_group): each group's sums start from zero and are added into dw in
order, so the chunks of the batch (whole groups) never change a bit. Each dw entry is one
lane's chain of fused multiply-adds over its group's pixels in order: the same bits on any
thread count, any set count below and any vector width.

Where O is not a multiple of the lanes, the last vector's extra lanes read on into the next
pixel's row (or the vector's room after the last row): their sums are computed and never
written."""

import numpy as np
from numba import prange

from ._jit import by_size, njit
from ._simd import VECTOR_BYTES, lanes, vfma, vload, vstore, vtranspose, vzero
from ._tiles import lanes_of

# Non-negative indices as unsigned: Numba then drops its negative-index wraparound.
_u = np.uint64
#: Input channels a loop: 3 x 9 sums fill 27 of AVX-512's 32 vector registers; AVX2 has 16,
#: which one channel's nine sums fit.
CHANNELS = 3 if VECTOR_BYTES == 64 else 1


def _padded_taps(acc, x, base, w2, span, d):
    """acc[3p + q] + x[base + p*W2 + q] * d for the nine taps of conv3x3's padded planes. The
    offsets are written p*W2 + q with q literal, so the three taps of a row share an address
    register and differ by a constant: the nine addresses of three channels fit the
    registers, where nine runtime shifts spilled them. `span` is unused here."""
    r1, r2 = base + w2, base + 2 * w2
    return (
        vfma(acc[0], x[_u(base)], d), vfma(acc[1], x[_u(base + 1)], d),
        vfma(acc[2], x[_u(base + 2)], d), vfma(acc[3], x[_u(r1)], d),
        vfma(acc[4], x[_u(r1 + 1)], d), vfma(acc[5], x[_u(r1 + 2)], d),
        vfma(acc[6], x[_u(r2)], d), vfma(acc[7], x[_u(r2 + 1)], d),
        vfma(acc[8], x[_u(r2 + 2)], d),
    )  # fmt: skip


def _phase_taps(acc, x, base, w2, span, d):
    """The same for conv3x3s2's phase planes, the four phases of a channel `span` elements
    apart in x: tap (p, q) reads phase 2*(p%2) + q%2 at base + (p//2)*W2 + q//2."""
    ee, eo, oe, oo = base, base + span, base + 2 * span, base + 3 * span
    return (
        vfma(acc[0], x[_u(ee)], d), vfma(acc[1], x[_u(eo)], d),
        vfma(acc[2], x[_u(ee + 1)], d), vfma(acc[3], x[_u(oe)], d),
        vfma(acc[4], x[_u(oo)], d), vfma(acc[5], x[_u(oe + 1)], d),
        vfma(acc[6], x[_u(ee + w2)], d), vfma(acc[7], x[_u(eo + w2)], d),
        vfma(acc[8], x[_u(ee + w2 + 1)], d),
    )  # fmt: skip


def _nine_zeros(a):
    z = vzero(a)
    return (z, z, z, z, z, z, z, z, z)


def _add_taps(dw, o0, ci, acc, add, lanes):
    """dw[o0 + l, ci, p, q] = lane l of acc[3p + q] (or += it: add), for the lanes that are
    filters (o0 + l < O); `lanes` is one vector's worth of scratch."""
    for k in range(9):
        vstore(lanes, 0, acc[k])
        for lane in range(min(lanes.size, dw.shape[0] - o0)):
            if add:
                dw[o0 + lane, ci, k // 3, k % 3] += lanes[lane]
            else:
                dw[o0 + lane, ci, k // 3, k % 3] = lanes[lane]


padded_taps = njit(inline="always", cache=True)(_padded_taps)
phase_taps = njit(inline="always", cache=True)(_phase_taps)
nine_zeros = njit(inline="always", cache=True)(_nine_zeros)
add_taps = njit(inline="always", cache=True)(_add_taps)


def _filter_lanes(dw, dyt, src, oh, ow, w2, plane, group, sets, accumulate, phases):
    """dw (+)= the sums of the module's docstring over a chunk of samples: dyt[(n*OH + i)*OW +
    j, o] is dy transposed (and a vector's room after it), src[c] the chunk's input layout of
    channel c: its padded planes end to end, each `plane` long (phases False), or its four
    phases' planes, each phase's planes end to end (phases True). Overwrites dw, or adds to
    it (accumulate: a later chunk).

    Parallel over (vector of filters, set of channels): a task runs its groups in order and,
    within a group, its channels CHANNELS at a time, so the group's rows of dy stay in the
    cache across them. `sets` cuts the channels into sets of ceil(C / sets) channels, the last
    ones smaller or empty (more tasks for more threads: the bits do not depend on it), and a
    set's last loop sums only the channels it has left: ResNet-20's 16 channels of 32x32 on
    two threads are two sets of 8, loops of 3, 3 and 2 channels, where sets of whole loops (9
    and 7) ran 3 loops of three each (0.417 against 0.447 ms a pass, 2-core AMD EPYC). With
    CHANNELS 1 the second and third channel's sums are never computed (the branches on the
    constant are compiled out)."""
    c, o = src.shape[0], dw.shape[0]
    nb = src.shape[1] // (4 * plane if phases else plane)
    nl = VECTOR_BYTES // dw.itemsize
    per_set = (c + sets - 1) // sets
    span = nb * plane  # one phase's planes of a channel
    for t in prange(((o + nl - 1) // nl) * sets):
        o0 = (t // sets) * nl
        first, end = (t % sets) * per_set, min(c, (t % sets + 1) * per_set)
        lanes = np.empty(nl, dw.dtype)
        for n0 in range(0, nb, group):
            add = accumulate or n0 > 0
            for c0 in range(first, end, CHANNELS):
                c1, c2 = min(c0 + 1, end - 1), min(c0 + 2, end - 1)
                x0, x1, x2 = src[c0], src[c1], src[c2]
                s0 = nine_zeros(dw)
                s1 = nine_zeros(dw)
                s2 = nine_zeros(dw)
                for n in range(n0, min(nb, n0 + group)):
                    for i in range(oh):
                        row = (n * oh + i) * ow
                        base = n * plane + i * w2
                        for j in range(ow):
                            d = vload(dyt, (row + j) * o + o0)
                            if phases:
                                s0 = phase_taps(s0, x0, base + j, w2, span, d)
                                if CHANNELS == 3 and c1 > c0:
                                    s1 = phase_taps(s1, x1, base + j, w2, span, d)
                                if CHANNELS == 3 and c2 > c1:
                                    s2 = phase_taps(s2, x2, base + j, w2, span, d)
                            else:
                                s0 = padded_taps(s0, x0, base + j, w2, span, d)
                                if CHANNELS == 3 and c1 > c0:
                                    s1 = padded_taps(s1, x1, base + j, w2, span, d)
                                if CHANNELS == 3 and c2 > c1:
                                    s2 = padded_taps(s2, x2, base + j, w2, span, d)
                add_taps(dw, o0, c0, s0, add, lanes)
                if CHANNELS == 3 and c1 > c0:
                    add_taps(dw, o0, c1, s1, add, lanes)
                if CHANNELS == 3 and c2 > c1:
                    add_taps(dw, o0, c2, s2, add, lanes)


filter_lanes = njit(parallel=True, cache=True)(_filter_lanes)


def _transpose(dyt, dy):
    """dyt[(n*H + i)*W + j, o] = dy[n, o, i, j]: each pixel's row of filters. A copy: in blocks
    of lanes x lanes elements transposed in registers (_simd.vtranspose) where the filters and a
    sample's pixels are whole vectors (ResNet's 16 to 64 filters of 8x8 to 32x32 pixels), else
    element by element, about one a cycle. On ResNet-20's dy at batch 32 (2-core AMD EPYC, the
    median of 150 calls, the two in turn): 16 filters of 32x32 0.039 ms in blocks against 0.081
    element by element, 32 of 16x16 0.012 against 0.038, 64 of 8x8 0.010 against 0.037; a
    compiled step, the two switched step by step, ResNet-20 1.014x and ResNet-56 1.019x.
    Parallel over the samples from PARALLEL_FROM elements of dy (by_size)."""
    nb, o, h, wd = dy.shape
    hw, nl = h * wd, lanes_of(dyt)
    flat = dy.reshape(nb * o * hw)
    blocks = o % nl == 0 and hw % nl == 0
    for n in prange(nb):
        if blocks:
            for u0 in range(0, hw, nl):
                for o0 in range(0, o, nl):
                    vtranspose(dyt, (n * hw + u0) * o + o0, o, flat, (n * o + o0) * hw + u0, hw)
            continue
        for i in range(h):
            row = (n * h + i) * wd
            for oi in range(o):
                for j in range(wd):
                    dyt[_u((row + j) * o + oi)] = dy[n, oi, i, j]


transpose = by_size(_transpose, on=1)


def transposed(workspace, start, dy):
    """dy transposed into workspace[start:] (transpose), and the view filter_lanes reads: its
    N*H*W*O elements and a vector's room after them, which the last row's vector reads when O
    is not a multiple of the lanes (kernels/sizes.py counts it in the filter passes' need)."""
    nb, o, h, wd = dy.shape
    size = nb * h * wd * o + lanes(dy.dtype)
    dyt = workspace[start : start + size]
    assert dyt.size == size  # the caller's workspace holds the room
    transpose(dyt, np.ascontiguousarray(dy))  # (a copy only for a view: the blocks read rows)
    return dyt


def channel_sets(c, o, dtype, threads):
    """How many sets filter_lanes cuts the C channels into: enough tasks (vectors of O
    filters of `dtype` times sets) for the threads, at most one set a channel. A loop of one
    channel loads dy's vector for 9 multiply-adds where three channels' take 27, but its other
    loads, one a multiply-add, are the same: on 2 threads the first layer's 3 channels as two
    sets (one thread idle with one set) took 0.158 against 0.187 ms (ResNet-20, batch 32, 2-core
    AMD EPYC); 16 filters of 16 channels on 16 threads are 16 tasks, not 6."""
    vectors = -(-o // lanes(dtype))
    return max(1, min(c, -(-threads // max(vectors, 1))))
