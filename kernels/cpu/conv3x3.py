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
elements (i + p)*W2 + j + q of its padded plane: no bounds to test in the loop. Where a row
is narrower than a vector and a vector holds whole rows (the 8x8 planes of ResNet's last stage
in float32 with AVX-512), forward and backward data keep the rows W long instead and mask the
taps that would read the next or the previous row (_narrow.py: no sums on padding columns).

Backward data is the forward pass of the padded dy, with the filters flipped and their two
channel axes swapped: dx[n,c,i,j] = sum_{o,p,q} w[o,c,2-p,2-q] dypad[n,o,i+p,j+q].
Backward filter is nine dot products per (filter, channel) pair, over the batch:
dw[o,c,p,q] = sum_n sum_{i,j} dy[n,o,i,j] xpad[n,c,i+p,j+q], summed with the filters in the
vector's lanes: dy is transposed into a row of O filters per pixel, and each padded input
pixel, broadcast, multiplies a vector of filters (_filter_lanes.py).

Workspace: ``conv3x3_workspace_per_sample`` elements per sample (kernels/sizes.py), the most
any pass needs: forward, the padded planes of x and each output plane's sums in rows as long as
the padded ones, where vectors run across rows when a row is narrower than a vector (planes of
7x7 or 14x14; _narrow.py's planes need less); backward data, the same for dy and dx; backward
filter, the padded planes of x and dy transposed. The batch runs in chunks of as many samples as the
workspace holds; backward filter's chunks are whole sample groups (conv3x3_filter_sample_group,
below), so its workspace must hold one group.

Non-finite numbers: a NaN or infinity reaches every output it reaches in the direct kernels. One
difference comes from the padding: backward filter multiplies the zeros of x's border with
dy, and 0 * inf or 0 * NaN is NaN, where the direct kernel skips those terms; so more entries
of dw may be NaN (an infinity in dy[n, o] can make dw[o] NaN where its taps read the border),
none finite that the direct kernel makes NaN or infinite.

Determinism: one thread computes each output element (each dw entry) in a fixed order, so the
result does not depend on the thread count. Every sum is a chain of fused multiply-adds (one
rounding per term) in an order fixed by the shapes, in one vector lane or one register: no
sum runs across lanes, so the bits are the same with any vector width. No pass depends on the
workspace's size: forward and backward data compute each sample alone, whatever the chunk,
and backward filter sums sample groups fixed by the image size (samples [0, G), [G, 2G), ...
with G = conv3x3_filter_sample_group) and adds them into dw in order, every chunk being whole
groups."""

import numpy as np
from numba import get_num_threads, prange

from ..sizes import (
    conv3x3_filter_need,
    conv3x3_filter_sample_group,
    conv3x3_forward_need,
    conv3x3_forward_plane,
    conv3x3_plane,
    conv3x3_sums,
)
from ._filter_lanes import channel_sets, filter_lanes, transposed
from ._jit import by_size, njit
from ._narrow import applies as narrow_applies
from ._narrow import forward_narrow
from ._tiles import forward_tiles

# Non-negative indices as unsigned: Numba then drops its negative-index wraparound, which
# blocks vectorisation (conv.py says more).
_u = np.uint64


def _check(y, x, w):
    n, c, h, wd = x.shape
    o = w.shape[0]
    if w.shape[1] != c or w.shape[2] != 3 or w.shape[3] != 3:
        raise ValueError("conv3x3: w must have shape (O, C, 3, 3)")
    if y.shape[0] != n or y.shape[1] != o or y.shape[2] != h or y.shape[3] != wd:
        raise ValueError("conv3x3: y must have shape (N, O, H, W), the input's H and W")


check = njit(cache=True)(_check)


def _spread(planes, x, channel_major):
    """x's padded planes: each plane of x laid out in a plane of `planes`, zeros, then x[n, c]'s
    rows W + 2 apart from element W + 3 (past the top border row and the left border column).
    Writes planes (N, C, plane), or (C, N, plane) when channel_major (each channel's planes end
    to end: backward filter). A copy, memory-bound: parallel over the planes from
    PARALLEL_FROM elements of x (by_size), serial below."""
    nb, c, h, wd = x.shape
    w2 = wd + 2
    first = wd + 3
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
    """out = the padded-plane convolution of source (_tiles.py's register tiles), in chunks; on
    _narrow.py's planes where its rows are narrower than a vector."""
    n, ni, h, wd = source.shape
    na = out.shape[1]
    b = _chunks(n, workspace, conv3x3_forward_need(ni, na, h, wd))
    if narrow_applies(out):  # rows narrower than a vector: _narrow.py's planes
        for n0 in range(0, n, b):
            forward_narrow(out[n0 : n0 + b], source[n0 : n0 + b], w, workspace, flipped)
        return
    w2 = wd + 2
    shifts = (0, 1, 2, w2, w2 + 1, w2 + 2, 2 * w2, 2 * w2 + 1, 2 * w2 + 2)  # tap (p, q)
    for n0 in range(0, n, b):
        chunk = source[n0 : n0 + b]
        padded, sums = _views(workspace, chunk.shape[0], ni, na, h, wd)
        spread(padded, chunk, False)
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
    sets = channel_sets(c, o, dw.dtype, get_num_threads())
    for n0 in range(0, n, b):
        chunk = x[n0 : n0 + b]
        nb = chunk.shape[0]
        # channel-major: each channel's padded planes of the chunk end to end
        padded = workspace[: c * nb * plane].reshape(c, nb, plane)
        spread(padded, chunk, True)
        dyt = transposed(workspace, c * nb * plane, dy[n0 : n0 + b])
        src = padded.reshape(c, nb * plane)
        filter_lanes(dw, dyt, src, h, wd, wd + 2, plane, group, sets, n0 > 0, False)
