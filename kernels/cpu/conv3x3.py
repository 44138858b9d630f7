"""3x3 convolutions with stride 1 and padding 1: register tiles on padded planes.

y[n,o,i,j] = sum_{c,p,q} w[o,c,p,q] x[n,c,i+p-1,j+q-1] (zero padding; p, q in 0..2), so the
output has the input's height and width. The three passes of conv.py, for this one geometry.

Why a kernel of its own. The im2col + GEMM path copies every input pixel nine times into a
column matrix and then runs a GEMM with only O rows (16 in ResNet's first stage), which OpenBLAS
runs at a third of its speed on square products; measured on this 2-core machine for ResNet-20's
16-channel layers (batch 32, 32x32): forward 3.9 ms by GEMM, 0.93 ms by a loop over padded
planes; and in another run, alternating, the median of 150 calls: that loop 1.09 ms, this
file's register tiles 0.67 ms. Here the nine inputs of an output pixel are nine shifted reads
of the same padded input plane, and the forward pass keeps a tile of sums (two vectors of
pixels of eight output planes) in vector registers across the whole sum over input
channels and taps (_tiles.py; _simd.py gives Numba the vector type).

Padded planes (the workspace): each input plane is copied once with a zero border of one
pixel, row length W2 = W + 2, flattened, plus two trailing zeros. Output (i, j) then reads
elements (i + p)*W2 + j + q of its padded plane: no bounds to test in the loop.

Backward data is the forward pass of the padded dy, with the filters flipped and their two
channel axes swapped: dx[n,c,i,j] = sum_{o,p,q} w[o,c,2-p,2-q] dypad[n,o,i+p,j+q].
Backward filter is nine dot products per (filter, channel) pair, over the batch:
dw[o,c,p,q] = sum_n sum_{i,j} dy[n,o,i,j] xpad[n,c,i+p,j+q], each one loop over the planes of a
group of samples laid end to end, with dy copied into rows as long as the padded ones (zeros in
the extra columns and rows).

Workspace: ``conv3x3_workspace_per_sample`` elements per sample (kernels/sizes.py), the most
any pass needs: forward, the padded planes of x and each output plane's sums in rows as long as
the padded ones, where vectors run across rows when a row is narrower than a vector (the 8x8
planes of ResNet's last stage); backward data, the same for dy and dx; backward filter, the
padded planes of x and the planes of dy. The batch runs in chunks of as many samples as the
workspace holds; backward filter's chunks are whole sample groups (conv3x3_filter_sample_group,
below), so its workspace must hold one group.

Non-finite numbers: a NaN or infinity reaches every output it reaches in the direct kernels. One
difference comes from the padding: backward filter multiplies zeros (the border, the extra
columns of dy's rows, the zero rows between the samples of a group) with what lies beside
them, and 0 * inf or 0 * NaN is NaN, where the direct kernel skips those terms; so more
entries of dw may be NaN (an infinity in x[n, c] can make all of dw[:, c] NaN), none finite
that the direct kernel makes NaN or infinite.

Determinism: one thread computes each output element (each dw entry) in a fixed order, so the
result does not depend on the thread count. The forward sums are chains of fused multiply-adds
(one rounding per term), and backward filter's dot products are vectorised by letting LLVM
reassociate their sums ("reassoc"): fixed choices, the same on every call of the compiled
kernel. No pass depends on the workspace's size: forward and backward data compute each sample
alone, whatever the chunk, and backward filter sums sample groups fixed by the image size
(samples [0, G), [G, 2G), ... with G = conv3x3_filter_sample_group) and adds them into dw in
order, every chunk being whole groups."""

import numpy as np
from numba import prange

from ..sizes import (
    conv3x3_filter_need,
    conv3x3_filter_sample_group,
    conv3x3_forward_need,
    conv3x3_forward_plane,
    conv3x3_plane,
    conv3x3_sums,
)
from ._jit import by_size, njit
from ._tiles import forward_tiles

# Non-negative indices as unsigned: Numba then drops its negative-index wraparound, which
# blocks vectorisation (conv.py says more).
_u = np.uint64
# Input channels per task of backward filter (with a pair of filters): see _planes_filter.
CHANNEL_BLOCK = 8


def _check(y, x, w):
    n, c, h, wd = x.shape
    o = w.shape[0]
    if w.shape[1] != c or w.shape[2] != 3 or w.shape[3] != 3:
        raise ValueError("conv3x3: w must have shape (O, C, 3, 3)")
    if y.shape[0] != n or y.shape[1] != o or y.shape[2] != h or y.shape[3] != wd:
        raise ValueError("conv3x3: y must have shape (N, O, H, W), the input's H and W")


check = njit(cache=True)(_check)


def _spread(planes, x, first, channel_major):
    """Each plane of x laid out in a plane of `planes`: zeros, then x[n, c]'s rows W + 2 apart
    from element `first`: x's padded planes (first = W + 3: past the top border row and the
    left border column) or dy's rows as long as the padded ones (first = 0: its two extra
    columns zero). Writes planes (N, C, plane), or (C, N, plane) when channel_major (each
    channel's planes end to end: backward filter). A copy, memory-bound: parallel over the
    planes from PARALLEL_FROM elements of x (by_size), serial below."""
    nb, c, h, wd = x.shape
    w2 = wd + 2
    for t in prange(nb * c):
        n, ci = t // c, t % c
        plane = planes[ci, n] if channel_major else planes[n, ci]
        for u in range(plane.size):
            plane[u] = 0
        for i in range(h):
            row = first + i * w2
            for j in range(wd):
                plane[_u(row + j)] = x[n, ci, i, j]


spread = by_size(_spread, on=1)


def _planes_filter(dw, rows, padded, w2, plane, group, accumulate):
    """dw[o,c,p,q] (+)= sum_u rows[o,u] padded[c,u+p*W2+q], over the samples of a chunk laid
    end to end: padded[c] holds the chunk's padded planes of channel c one after another (each
    `plane` elements), rows[o] holds dy's planes the same way, in rows as long as the padded
    ones, W2 (zeros in the two extra columns and in the rest of each plane: spread). Overwrites
    dw, or adds to it (accumulate: a later chunk of the batch).

    The samples are summed in groups: one loop runs over a group of `group` consecutive
    samples, at most CONV3X3_GROUP_ELEMENTS elements (one sample when its plane is longer:
    kernels/sizes.py, conv3x3_filter_sample_group), and the groups add up in order. Where the
    loop crosses from one sample into the next, rows is zero, so with finite numbers nothing of
    one sample meets the other's input. One loop over many 8x8 planes, where a loop per sample
    would be 80 elements long, spends less on finishing its sums (measured 1.4x faster); a
    group's two rows (below) stay in the L1 cache. The chunk starts at a group's first sample
    (conv3x3_backward_filter cuts the batch into whole groups), so the groups are the same in
    every chunking.

    Two filters share each loop: the nine shifted reads of the input plane feed both filters'
    nine sums (18 sums, one vector register each), so a loop makes 11 reads for 18
    multiply-adds where one filter made 10 for 9 (measured 1.4-1.7x faster). With an odd number
    of filters the last one's partner is itself, and its second sums are thrown away.

    Parallel over (pair of filters, block of CHANNEL_BLOCK channels): a thread keeps its two
    rows in the L1 cache while the block's padded planes stream past them, and there are
    enough tasks for 16 threads with 16 filters. Each dw[o, c] is one task's, summed in an
    order fixed by the shapes and the group: the same bits on any number of threads."""
    o = rows.shape[0]
    c = padded.shape[0]
    nb = rows.shape[1] // plane
    size = plane - 2 * w2 - 2  # a sample's rows of dy: H*W2
    r1 = _u(w2)
    r2 = _u(2 * w2)
    pairs = (o + 1) // 2
    blocks = (c + CHANNEL_BLOCK - 1) // CHANNEL_BLOCK
    zero = dw.dtype.type(0)  # sums in the arrays' own dtype
    for t in prange(pairs * blocks):
        oc = (t // blocks) * 2
        od = oc + 1 if oc + 1 < o else oc  # the partner: itself when o is odd
        c0 = (t % blocks) * CHANNEL_BLOCK
        g, g2 = rows[oc], rows[od]
        for n0 in range(0, nb, group):
            lo = n0 * plane
            hi = (min(nb, n0 + group) - 1) * plane + size  # to the group's last row of dy
            add = accumulate or n0 > 0
            for ci in range(c0, min(c, c0 + CHANNEL_BLOCK)):
                src = padded[ci]
                s00 = s01 = s02 = s10 = s11 = s12 = s20 = s21 = s22 = zero
                t00 = t01 = t02 = t10 = t11 = t12 = t20 = t21 = t22 = zero
                for u in range(lo, hi):
                    v = _u(u)
                    x00, x01, x02 = src[v], src[v + _u(1)], src[v + _u(2)]
                    x10, x11, x12 = src[r1 + v], src[r1 + v + _u(1)], src[r1 + v + _u(2)]
                    x20, x21, x22 = src[r2 + v], src[r2 + v + _u(1)], src[r2 + v + _u(2)]
                    d, e = g[v], g2[v]
                    s00 += d * x00
                    s01 += d * x01
                    s02 += d * x02
                    s10 += d * x10
                    s11 += d * x11
                    s12 += d * x12
                    s20 += d * x20
                    s21 += d * x21
                    s22 += d * x22
                    t00 += e * x00
                    t01 += e * x01
                    t02 += e * x02
                    t10 += e * x10
                    t11 += e * x11
                    t12 += e * x12
                    t20 += e * x20
                    t21 += e * x21
                    t22 += e * x22
                add_sums(dw, oc, ci, add, s00, s01, s02, s10, s11, s12, s20, s21, s22)
                if od != oc:
                    add_sums(dw, od, ci, add, t00, t01, t02, t10, t11, t12, t20, t21, t22)


def _add_sums(dw, oc, ci, add, s00, s01, s02, s10, s11, s12, s20, s21, s22):
    """dw[oc, ci] = the nine sums, or += them (add)."""
    sums = ((s00, s01, s02), (s10, s11, s12), (s20, s21, s22))
    for p in range(3):
        for q in range(3):
            if add:
                dw[oc, ci, p, q] += sums[p][q]
            else:
                dw[oc, ci, p, q] = sums[p][q]


add_sums = njit(inline="always", cache=True)(_add_sums)
planes_filter = njit(parallel=True, cache=True, fastmath={"reassoc", "nsz", "contract"})(
    _planes_filter
)


def _chunks(n, workspace, per_sample, group=1):
    """Samples per chunk: as many as the workspace holds, whole groups of `group` samples
    unless the chunk is the whole batch; it must hold one group."""
    if workspace.ndim != 1 or workspace.size < group * per_sample:
        raise ValueError(
            f"conv3x3: the workspace has {workspace.size} elements, {group} sample(s) of this "
            f"pass need {group * per_sample}; give it conv3x3_workspace_per_sample elements "
            f"per sample, for a group (conv3x3_filter_sample_group) at least"
        )
    samples = min(n, workspace.size // per_sample)
    return samples if samples == n else samples - samples % group


def _views(workspace, b, inputs, outputs, h, w):
    """(padded (b, inputs, conv3x3_forward_plane), sums (b, outputs, conv3x3_sums)) at the
    start of the workspace."""
    plane, rows = conv3x3_forward_plane(h, w), conv3x3_sums(h, w)
    padded = workspace[: b * inputs * plane].reshape(b, inputs, plane)
    end = b * inputs * plane + b * outputs * rows
    return padded, workspace[b * inputs * plane : end].reshape(b, outputs, rows)


def _forward(out, source, w, workspace, flipped):
    """out = the padded-plane convolution of source (_tiles.py's register tiles), in chunks."""
    n, ni, h, wd = source.shape
    na = out.shape[1]
    b = _chunks(n, workspace, conv3x3_forward_need(ni, na, h, wd))
    w2 = wd + 2
    shifts = (0, 1, 2, w2, w2 + 1, w2 + 2, 2 * w2, 2 * w2 + 1, 2 * w2 + 2)  # tap (p, q)
    for n0 in range(0, n, b):
        chunk = source[n0 : n0 + b]
        padded, sums = _views(workspace, chunk.shape[0], ni, na, h, wd)
        spread(padded, chunk, wd + 3, False)
        forward_tiles(out[n0 : n0 + b], padded, sums, w, flipped, w2, shifts)


def conv3x3_forward(y, x, w, workspace):
    """y = conv2d(x, w), 3x3, stride 1, padding 1. Writes y; uses workspace."""
    check(y, x, w)
    _forward(y, x, w, workspace, False)


def conv3x3_backward_data(dx, dy, w, workspace):
    """dx = adjoint of conv3x3 w.r.t. x. Overwrites dx; uses workspace."""
    check(dy, dx, w)
    _forward(dx, dy, w, workspace, True)


def conv3x3_backward_filter(dw, dy, x, workspace):
    """dw = adjoint of conv3x3 w.r.t. w, the groups' sums added in order. Overwrites dw; uses
    workspace (one group at least)."""
    check(dy, x, dw)
    n, c, h, wd = x.shape
    o = dy.shape[1]
    plane = conv3x3_plane(h, wd)
    group = conv3x3_filter_sample_group(n, h, wd)
    b = _chunks(n, workspace, conv3x3_filter_need(c, o, h, wd), group)
    for n0 in range(0, n, b):
        chunk = x[n0 : n0 + b]
        nb = chunk.shape[0]
        # channel-major: each channel's planes of the chunk end to end (_planes_filter)
        padded = workspace[: c * nb * plane].reshape(c, nb, plane)
        rows = workspace[c * nb * plane : (c + o) * nb * plane].reshape(o, nb, plane)
        spread(padded, chunk, wd + 3, True)
        spread(rows, dy[n0 : n0 + b], 0, True)
        planes_filter(
            dw,
            rows.reshape(o, nb * plane),
            padded.reshape(c, nb * plane),
            wd + 2,
            plane,
            group,
            n0 > 0,
        )
