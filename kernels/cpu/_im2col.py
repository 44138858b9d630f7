"""The layouts of the im2col + GEMM algorithm (conv.py's docstring has the matrices): im2col's
column matrix of the input's taps, col2im its adjoint (a scatter-sum), im2row the column matrix
transposed (backward filter's tiles, _summed.py), and swap01, the (B, O, L) <-> (O, B, L)
transpose of the O-channel tensor. Copies, memory-bound."""

import numpy as np
from numba import prange

from ._jit import njit
from ._window import valid_range

# Non-negative indices as unsigned: Numba then drops its negative-index wraparound, which
# blocks vectorisation (conv.py says more).
_u = np.uint64


def _columns(name, cols, rows, x, kh, kw, sh, sw, ph, pw):
    """(OH, OW) of the windows over x (padding ph, pw on both sides), after checking that the
    matrix `cols` has `rows` rows of C*KH*KW taps x N*OH*OW pixels (rows True: im2row's
    transpose, N*OH*OW x C*KH*KW)."""
    nb, c, h, wd = x.shape
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (wd + 2 * pw - kw) // sw + 1
    taps, pixels = (1, 0) if rows else (0, 1)
    if cols.shape[taps] != c * kh * kw or cols.shape[pixels] != nb * oh * ow:
        shape = "(N*OH*OW, C*KH*KW)" if rows else "(C*KH*KW, N*OH*OW)"
        raise ValueError(f"{name}: {'rows' if rows else 'cols'} must have shape {shape}")
    return oh, ow


columns = njit(cache=True)(_columns)


def _im2col(cols, x, kh, kw, sh, sw, ph, pw):
    """cols[(c*KH+p)*KW+q, (b*OH+i)*OW+j] = x[b,c,i*sh+p-ph,j*sw+q-pw] or 0.
    Writes cols (C*KH*KW, B*OH*OW); parallel over rows."""
    nb, c, h, wd = x.shape
    oh, ow = columns("im2col", cols, False, x, kh, kw, sh, sw, ph, pw)
    for r in prange(c * kh * kw):
        ci = r // (kh * kw)
        p = (r // kw) % kh
        q = r % kw
        j_lo, j_hi = valid_range(ow, q, sw, pw, wd)
        off = q - pw
        for b in range(nb):
            for i in range(oh):
                base = (b * oh + i) * ow
                hh = i * sh + p - ph
                if hh < 0 or hh >= h:
                    for j in range(ow):
                        cols[r, _u(base + j)] = 0
                else:
                    for j in range(j_lo):
                        cols[r, _u(base + j)] = 0
                    for j in range(j_lo, j_hi):
                        cols[r, _u(base + j)] = x[b, ci, hh, _u(j * sw + off)]
                    for j in range(j_hi, ow):
                        cols[r, _u(base + j)] = 0


def _col2im(x, cols, kh, kw, sh, sw, ph, pw):
    """x[b,c,h,v] = sum of the cols entries im2col would read from x[b,c,h,v] (scatter-sum).
    Overwrites x; parallel over (b,c)."""
    nb, c, h, wd = x.shape
    oh, ow = columns("col2im", cols, False, x, kh, kw, sh, sw, ph, pw)
    for t in prange(nb * c):
        b = t // c
        ci = t % c
        for u in range(h):
            for v in range(wd):
                x[b, ci, u, v] = 0
        for p in range(kh):
            i_lo, i_hi = valid_range(oh, p, sh, ph, h)
            for q in range(kw):
                j_lo, j_hi = valid_range(ow, q, sw, pw, wd)
                r = (ci * kh + p) * kw + q
                off = q - pw
                for i in range(i_lo, i_hi):
                    hh = i * sh + p - ph
                    base = (b * oh + i) * ow
                    for j in range(j_lo, j_hi):
                        x[b, ci, hh, _u(j * sw + off)] += cols[r, _u(base + j)]


def _swap01(out, x):
    """out[j, i, :] = x[i, j, :] for x (A, B, L), out (B, A, L).
    Writes out; parallel over (i, j) rows."""
    na, nb, nl = x.shape
    for t in prange(na * nb):
        i = t // nb
        j = t % nb
        for k in range(nl):
            out[j, i, _u(k)] = x[i, j, _u(k)]


def _im2row(rows, x, kh, kw, sh, sw, ph, pw):
    """rows[(b*OH+i)*OW+j, (c*KH+p)*KW+q] = x[b,c,i*sh+p-ph,j*sw+q-pw] or 0: im2col's matrix
    transposed, a row of K taps per output pixel (backward filter's tiles, _summed.py).
    Writes rows (N*OH*OW, C*KH*KW); parallel over rows of output pixels."""
    nb, c, h, wd = x.shape
    oh, ow = columns("im2row", rows, True, x, kh, kw, sh, sw, ph, pw)
    for t in prange(nb * oh):
        b, i = t // oh, t % oh
        for j in range(ow):
            row = rows[t * ow + j]
            v0 = j * sw - pw  # the column of tap q = 0
            q_lo, q_hi = max(-v0, 0), min(wd - v0, kw)  # the taps within the input's columns
            for ci in range(c):
                for p in range(kh):
                    hh = i * sh + p - ph
                    base = (ci * kh + p) * kw
                    if hh < 0 or hh >= h:
                        for q in range(kw):
                            row[_u(base + q)] = 0
                        continue
                    for q in range(q_lo):
                        row[_u(base + q)] = 0
                    for q in range(q_lo, q_hi):
                        row[_u(base + q)] = x[b, ci, hh, _u(v0 + q)]
                    for q in range(max(q_hi, q_lo), kw):
                        row[_u(base + q)] = 0


im2col = njit(parallel=True, cache=True)(_im2col)
col2im = njit(parallel=True, cache=True)(_col2im)
im2row = njit(parallel=True, cache=True)(_im2row)
swap01 = njit(parallel=True, cache=True)(_swap01)
