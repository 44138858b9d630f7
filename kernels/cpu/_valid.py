"""The direct forward of a valid convolution with stride 1 (no padding, no dilation, one group)
on register tiles, where it applies: conv.py's direct forward tries it first and runs its loops
where it declines (False).

    y[n,o,i,j] = sum_{c,p,q} w[o,c,p,q] x[n,c,i+p,j+q]

Without padding, tap (p, q) of output pixel (i, j) is x's element (i+p)*W + j+q, a fixed shift
p*W + q from i*W + j, and no read passes x's plane (the last is (OH-1+KH-1)*W + OW-1+KW-1 =
H*W - 1): x's own planes are the layout, nothing is copied and no workspace is needed, as the
direct algorithm promises. The SINGA CNN's first layer (1 channel, 5x5 filters, 24x24 outputs)
is the case it was written for: its forward ran on im2col and GEMMs of 20 rows by 25, at 26
GFLOP/s on a 2-core AMD EPYC (Zen 5). (Its backward filter, the same shifts summed over the
pixels in float64 vectors, ran at 28-30 GFLOP/s there, no faster than its GEMM, and was left
out: each row of 24 pixels is three vectors, too little work per row.)
"""

import numpy as np

from ._simd import lanes
from ._tiles import valid_tiles


def valid_forward(y, x, w, sh, sw, ph, pw, groups, dil_h, dil_w, ph_end, pw_end):
    """y = x (*) w on the register tiles (_tiles.valid_tiles), where it applies: True when done
    (then y is written), False where the loops must run. It applies to a valid convolution
    with stride 1 of float32 or float64 (all three arrays alike), x and y C-contiguous, whose
    output rows hold a vector. Each output is one chain of fused multiply-adds over (c, p, q)
    from zero, where the loops round each product and sum: the last bits differ from theirs.
    The CNN's first layer: 180-190 GFLOP/s in its training step on the 2-core AMD EPYC."""
    n, c, h, wd = x.shape
    o, cw, kh, kw = w.shape
    oh, ow = h - kh + 1, wd - kw + 1
    if (sh, sw, ph, pw, groups, dil_h, dil_w) != (1, 1, 0, 0, 1, 1, 1) or ph_end or pw_end:
        return False
    if x.dtype not in (np.float32, np.float64) or not x.dtype == y.dtype == w.dtype:
        return False
    if not (x.flags.c_contiguous and y.flags.c_contiguous) or cw != c:
        return False
    if y.shape != (n, o, oh, ow) or oh < 1 or ow < lanes(y.dtype) or n * o == 0:
        return False
    valid_tiles(y.reshape(n, o, oh * ow), x.reshape(n, c, h * wd), w, oh, ow, wd)
    return True
