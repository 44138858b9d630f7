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

then the phases are interleaved back into dx (dx[2r+a-1, 2s+b-1] = dxph[a,b][r,s]).
Backward filter is nine dot products per (filter, channel) pair over the batch,
dw[o,c,p,q] = sum_n sum_{i,j} dy[n,o,i,j] phase[p%2,q%2][n,c,i+p//2,j+q//2], with the
filters in the vector's lanes over dy transposed, samples in groups, as conv3x3's
(_filter_lanes.py).

Workspace: ``conv3x3s2_workspace_per_sample`` elements per sample (kernels/sizes.py): forward,
the phase planes of x and each output plane's sums (_tiles.py); backward data, dy's padded
planes and the four phase sums of each dx plane (and a spare); backward filter, the phase
planes of x and dy transposed. The batch runs in chunks of as many samples as the workspace holds;
backward filter's chunks are whole groups (conv3x3s2_filter_sample_group).

Determinism and non-finite numbers: as in conv3x3. One thread computes each output element in
an order fixed by the shapes (chains of fused multiply-adds), the forward passes compute each
sample alone and backward filter adds fixed sample groups in order, so neither the thread
count nor the workspace size changes a bit. Backward filter multiplies the zeros of the
padding with dy: an infinity in dy may make more of dw NaN than the direct kernel does.
"""

import numpy as np
from numba import get_num_threads, prange

from ..sizes import (
    conv3x3s2_data_need,
    conv3x3s2_dy_plane,
    conv3x3s2_filter_need,
    conv3x3s2_filter_sample_group,
    conv3x3s2_forward_need,
    conv3x3s2_phase_plane,
    conv3x3s2_sums,
)
from ._filter_lanes import channel_sets, filter_lanes, transposed
from ._jit import njit
from ._phases import rows, split
from ._tiles import forward_tiles

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


def _taps(w, o, c, real):
    """The nine taps w[o, c] in the order (00, 01, 02, 10, ..., 22), or nine zeros (not real:
    the partner of the last of an odd number of dy planes, whose plane is the zero spare)."""
    z = w.dtype.type(0)
    if not real:
        return z, z, z, z, z, z, z, z, z
    return (
        w[o, c, 0, 0], w[o, c, 0, 1], w[o, c, 0, 2],
        w[o, c, 1, 0], w[o, c, 1, 1], w[o, c, 1, 2],
        w[o, c, 2, 0], w[o, c, 2, 1], w[o, c, 2, 2],
    )  # fmt: skip


taps = njit(inline="always", cache=True)(_taps)


def _phases_data(dx, dyp, acc, w):
    """dx = the adjoint of the forward w.r.t. x: for each dx plane c, the four phase sums of
    the module docstring over dy's padded planes dyp (O of them, and a zero spare dyp[n, O]),
    in acc[n, c] (4 planes of (OH+1)*W2), then interleaved into dx.

    Each pass over the planes serves two dx planes and two dy planes (the eight reads of dyp
    feed 36 multiply-adds into eight sums: half the accumulator updates per multiply-add of one
    dy plane at a time), in four loops, one per phase plane: a loop that updates two sums
    vectorises, one that updated all eight did not (LLVM gives up proving that eight stores
    miss the loads; measured 1.9x slower). The last of an odd number of dx planes is partnered
    by the spare acc[n, C], the last of an odd number of dy planes by the zero plane with zero
    taps (adding zeros: the same sums). Overwrites dx and acc; parallel over pairs of dx
    planes.

    The slowest of the three passes (bench/conv.py, one thread: 36-50 GFLOP/s where forward
    and backward filter make 65-78): each multiply-add moves more memory than the forward's,
    which reads nine inputs into two sums; more dy planes per loop would share the updates."""
    nb, nc, h, wd = dx.shape
    no = dyp.shape[1] - 1
    w2 = (wd + 1) // 2 + 1
    rows = (h + 1) // 2 + 1
    size = rows * w2
    r1 = _u(w2)
    pairs = (nc + 1) // 2
    for t in prange(nb * pairs):
        n = t // pairs
        c = (t % pairs) * 2
        c2 = c + 1 if c + 1 < nc else c
        out, out2 = acc[n, c], acc[n, c + 1]
        for k in range(4):
            for u in range(size):
                out[k, u] = 0
                out2[k, u] = 0
        ee, eo, oe, oo = out[0], out[1], out[2], out[3]
        ee2, eo2, oe2, oo2 = out2[0], out2[1], out2[2], out2[3]
        for o in range(0, no, 2):
            real = o + 1 < no
            f00, f01, f02, f10, f11, f12, f20, f21, f22 = taps(w, o, c, True)
            g00, g01, g02, g10, g11, g12, g20, g21, g22 = taps(w, o, c2, True)
            h00, h01, h02, h10, h11, h12, h20, h21, h22 = taps(w, o + 1, c, real)
            k00, k01, k02, k10, k11, k12, k20, k21, k22 = taps(w, o + 1, c2, real)
            src, src2 = dyp[n, o], dyp[n, o + 1 if real else no]
            # one loop per phase plane (see the docstring)
            for u in range(size):
                v = _u(u)
                d00, d01, d10, d11 = src[v], src[v + _u(1)], src[r1 + v], src[r1 + v + _u(1)]
                e00, e01 = src2[v], src2[v + _u(1)]
                e10, e11 = src2[r1 + v], src2[r1 + v + _u(1)]
                ee[v] += (
                    f22 * d00 + f20 * d01 + f02 * d10 + f00 * d11
                    + h22 * e00 + h20 * e01 + h02 * e10 + h00 * e11
                )  # fmt: skip
                ee2[v] += (
                    g22 * d00 + g20 * d01 + g02 * d10 + g00 * d11
                    + k22 * e00 + k20 * e01 + k02 * e10 + k00 * e11
                )  # fmt: skip
            for u in range(size):
                v = _u(u)
                d01, d11 = src[v + _u(1)], src[r1 + v + _u(1)]
                e01, e11 = src2[v + _u(1)], src2[r1 + v + _u(1)]
                eo[v] += f21 * d01 + f01 * d11 + h21 * e01 + h01 * e11
                eo2[v] += g21 * d01 + g01 * d11 + k21 * e01 + k01 * e11
            for u in range(size):
                v = _u(u)
                d10, d11 = src[r1 + v], src[r1 + v + _u(1)]
                e10, e11 = src2[r1 + v], src2[r1 + v + _u(1)]
                oe[v] += f12 * d10 + f10 * d11 + h12 * e10 + h10 * e11
                oe2[v] += g12 * d10 + g10 * d11 + k12 * e10 + k10 * e11
            for u in range(size):
                v = _u(u)
                d11, e11 = src[r1 + v + _u(1)], src2[r1 + v + _u(1)]
                oo[v] += f11 * d11 + h11 * e11
                oo2[v] += g11 * d11 + k11 * e11
        for k in range(4):  # dx[2r + a - 1, 2s + b - 1] = phase k = 2a + b at (r, s)
            a, b = k // 2, k % 2
            for r in range(1 - a, (h - a) // 2 + 1):
                i = 2 * r + a - 1
                for s in range(1 - b, (wd - b) // 2 + 1):
                    dx[n, c, i, 2 * s + b - 1] = out[k, _u(r * w2 + s)]
                    if c + 1 < nc:
                        dx[n, c + 1, i, 2 * s + b - 1] = out2[k, _u(r * w2 + s)]


phases_data = njit(parallel=True, cache=True, fastmath={"contract"})(_phases_data)


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
    dplane, size = conv3x3s2_dy_plane(oh, ow), (oh + 1) * (ow + 1)
    b = _chunks(n, workspace, conv3x3s2_data_need(c, o, oh, ow))
    for n0 in range(0, n, b):
        nb = min(b, n - n0)
        dyp = workspace[: nb * (o + 1) * dplane].reshape(nb, o + 1, dplane)
        end = nb * (o + 1) * dplane + nb * (c + 1) * 4 * size
        acc = workspace[nb * (o + 1) * dplane : end].reshape(nb, c + 1, 4, size)
        rows(dyp[:, :o], dy[n0 : n0 + nb], ow + 1)
        dyp[:, o] = 0  # the spare: the partner of the last of an odd number of dy planes
        phases_data(dx[n0 : n0 + nb], dyp, acc, w)


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
