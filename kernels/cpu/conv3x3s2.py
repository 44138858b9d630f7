"""3x3 convolutions with stride 2 and padding 1 (ResNet's downsampling): on phase planes.

y[n,o,i,j] = sum_{c,p,q} w[o,c,p,q] xpad[n,c,2i+p,2j+q], with xpad x padded by one zero pixel
before (and as many after as the windows need); the output is OH x OW = ceil(H/2) x ceil(W/2).

Why a kernel of its own. A stride-2 window reads every other input pixel, so conv3x3's shifted
reads of one padded plane would be strided loads, which do not vectorise. The polyphase
decomposition makes them contiguous again: split xpad into its four phase planes,

    phase[a, b][r, s] = xpad[2r + a, 2s + b]        (a, b in {0, 1}; r <= OH, s <= OW),

each (OH + 1) x (OW + 1), rows W2 = OW + 1 apart, plus one trailing zero. Tap (p, q) of output
(i, j) is then phase[p % 2, q % 2][i + p // 2, j + q // 2]: element i*W2 + j of a phase plane,
shifted by 0, 1, W2 or W2 + 1. So the strided convolution is a sum of four stride-1 ones
(2x2, 2x1, 1x2 and 1x1 taps) over contiguous planes. With a channel's four phase planes end
to end, each tap is one fixed shift from the output pixel's offset, and the forward pass is
conv3x3's own register tiles (kernels/cpu/_tiles.py) with other shifts.

Backward data is the adjoint: each phase plane of dxpad gathers the taps that read it, a
stride-1 correlation of dy, padded by one zero row above and one zero column to the left
(dyp, rows W2 apart), with the taps of that phase, flipped:

    dxph[0,0] = w22 dyp[u] + w20 dyp[u+1] + w02 dyp[u+W2] + w00 dyp[u+W2+1]
    dxph[0,1] = w21 dyp[u+1] + w01 dyp[u+W2+1]    dxph[1,0] = w12 dyp[u+W2] + w10 dyp[u+W2+1]
    dxph[1,1] = w11 dyp[u+W2+1]                   (u = r*W2 + s)

each phase plane a stride-1 convolution with 4, 2, 2 or 1 taps, on the register tiles of the
forward (_tiles.py's phase_tiles: a kernel per phase, its taps fixed when it compiles); then
the phases are interleaved back into dx (dx[2r+a-1, 2s+b-1] = dxph[a,b][r,s]: _phases.merge).
Its earlier loops over whole planes, two dx and two dy planes at a time, ran at a third to a
half of the tiles' speed (82-118 against 160-217 GFLOP/s in bench/conv.py on ResNet-20's
stride-2 layers, 2-core AMD EPYC): every multiply-add read and wrote its sum in memory.
Backward filter is nine dot products per (filter, channel) pair over the batch,
dw[o,c,p,q] = sum_n sum_{i,j} dy[n,o,i,j] phase[p%2,q%2][n,c,i+p//2,j+q//2], with the
filters in the vector's lanes over dy transposed, samples in groups, as conv3x3's
(_filter_lanes.py).

Workspace: ``conv3x3s2_workspace_per_sample`` elements per sample (kernels/sizes.py): forward,
the phase planes of x and each output plane's sums (_tiles.py); backward data, dy's padded
planes and the four phase planes' sums of each dx plane; backward filter, the phase
planes of x and dy transposed. The batch runs in chunks of as many samples as the workspace holds;
backward filter's chunks are whole groups (conv3x3s2_filter_sample_group).

Determinism and non-finite numbers: as in conv3x3. One thread computes each output element in
an order fixed by the shapes (chains of fused multiply-adds), the forward passes compute each
sample alone and backward filter adds fixed sample groups in order, so neither the thread
count nor the workspace size changes a bit. Backward filter multiplies the zeros of the
padding with dy: an infinity in dy may make more of dw NaN than the direct kernel does.
"""

import numpy as np
from numba import get_num_threads

from ..sizes import (
    conv3x3s2_data_need,
    conv3x3s2_dy_plane,
    conv3x3s2_filter_need,
    conv3x3s2_filter_sample_group,
    conv3x3s2_forward_need,
    conv3x3s2_phase_plane,
    conv3x3s2_phase_sums,
    conv3x3s2_sums,
)
from ._filter_lanes import channel_sets, filter_lanes, transposed
from ._jit import njit
from ._phases import merge, rows, split
from ._tiles import PHASE_TILES, forward_tiles

# Non-negative indices as unsigned: Numba then drops its negative-index wraparound, which
# blocks vectorisation (conv.py says more).
_u = np.uint64


def _check(y, x, w):
    n, c, h, wd = x.shape
    o = w.shape[0]
    if w.shape[1] != c or w.shape[2] != 3 or w.shape[3] != 3:
        raise ValueError("conv3x3s2: w must have shape (O, C, 3, 3)")
    if (
        y.shape[0] != n
        or y.shape[1] != o
        or y.shape[2] != (h + 1) // 2
        or y.shape[3] != (wd + 1) // 2
    ):
        raise ValueError("conv3x3s2: y must have shape (N, O, ceil(H/2), ceil(W/2))")


check = njit(cache=True)(_check)


def _chunks(n, workspace, per_sample, group=1):
    """Samples per chunk: as many as the workspace holds, whole groups of `group` samples
    unless the chunk is the whole batch; it must hold one group."""
    if workspace.ndim != 1 or workspace.size < group * per_sample:
        raise ValueError(
            f"conv3x3s2: the workspace has {workspace.size} elements, {group} sample(s) of this "
            f"pass need {group * per_sample}; give it conv3x3s2_workspace_per_sample elements "
            f"per sample, for a group (conv3x3s2_filter_sample_group) at least"
        )
    samples = min(n, workspace.size // per_sample)
    return samples if samples == n else samples - samples % group


def conv3x3s2_forward(y, x, w, workspace):
    """y = conv2d(x, w), 3x3, stride 2, padding 1. Writes y; uses workspace."""
    check(y, x, w)
    n, c, h, wd = x.shape
    o, oh, ow = y.shape[1], y.shape[2], y.shape[3]
    plane, sums = conv3x3s2_phase_plane(oh, ow), conv3x3s2_sums(oh, ow)
    w2 = ow + 1
    # tap (p, q) reads phase k = 2*(p%2) + q%2 at (p//2)*W2 + q//2: the shift from the start
    # of the channel's four phase planes, which lie end to end
    shifts = tuple(
        (2 * (p % 2) + q % 2) * plane + (p // 2) * w2 + q // 2 for p in range(3) for q in range(3)
    )
    b = _chunks(n, workspace, conv3x3s2_forward_need(c, o, oh, ow))
    for n0 in range(0, n, b):
        nb = min(b, n - n0)
        phases = workspace[: nb * c * 4 * plane].reshape(nb, c, 4, plane)
        start = nb * c * 4 * plane + sums - oh * w2  # past the room for a short plane's reads
        acc = workspace[start : start + nb * o * sums].reshape(nb, o, sums)
        split(phases, x[n0 : n0 + nb], False)
        forward_tiles(y[n0 : n0 + nb], phases.reshape(nb, c, 4 * plane), acc, w, False, w2, shifts)


def conv3x3s2_backward_data(dx, dy, w, workspace):
    """dx = adjoint of conv3x3s2 w.r.t. x. Overwrites dx; uses workspace."""
    check(dy, dx, w)
    n, c, h, wd = dx.shape
    o, oh, ow = dy.shape[1], dy.shape[2], dy.shape[3]
    dplane, psums = conv3x3s2_dy_plane(oh, ow), conv3x3s2_phase_sums(oh, ow)
    w2 = ow + 1
    b = _chunks(n, workspace, conv3x3s2_data_need(c, o, oh, ow))
    for n0 in range(0, n, b):
        nb = min(b, n - n0)
        dyp = workspace[: nb * o * dplane].reshape(nb, o, dplane)
        end = nb * o * dplane + 4 * nb * c * psums
        phases = workspace[nb * o * dplane : end].reshape(4, nb, c, psums)
        rows(dyp, dy[n0 : n0 + nb], w2)
        for k in range(4):  # phase (a, b) = (k // 2, k % 2): rows 1 - a to OH - a of its sums
            PHASE_TILES[k](phases[k], dyp, w, (1 - k // 2) * w2, psums - w2, w2)
        merge(dx[n0 : n0 + nb], phases, w2)


def conv3x3s2_backward_filter(dw, dy, x, workspace):
    """dw = adjoint of conv3x3s2 w.r.t. w, the groups' sums added in order. Overwrites dw; uses
    workspace (one group at least)."""
    check(dy, x, dw)
    n, c, h, wd = x.shape
    o, oh, ow = dy.shape[1], dy.shape[2], dy.shape[3]
    plane = conv3x3s2_phase_plane(oh, ow)
    group = conv3x3s2_filter_sample_group(n, oh, ow)
    b = _chunks(n, workspace, conv3x3s2_filter_need(c, o, oh, ow), group)
    sets = channel_sets(c, o, dw.dtype, get_num_threads())
    if n == 0:  # no chunk writes dw: an empty batch's gradient is zero
        dw[...] = 0
    for n0 in range(0, n, b):
        nb = min(b, n - n0)
        phases = workspace[: c * 4 * nb * plane].reshape(c, 4, nb, plane)
        split(phases, x[n0 : n0 + nb], True)
        dyt = transposed(workspace, c * 4 * nb * plane, dy[n0 : n0 + nb])
        src = phases.reshape(c, 4 * nb * plane)
        filter_lanes(dw, dyt, src, oh, ow, ow + 1, plane, group, sets, n0 > 0, True)
