"""Sum reductions used for bias gradients, and the count of non-finite values that dynamic
loss scaling checks gradients with.

Determinism: a reduction is never split across threads. Each output element
(one column, one channel) is owned by one ``prange`` iteration, which sums its
inputs in a fixed order into a float64 accumulator and writes the result once,
so every call gives bit-identical results, whatever the thread scheduling.
No kernel allocates or needs a workspace.

``sum_rows`` is compiled serial: its inputs (a linear layer's bias gradient) are small,
and waking the threads (~0.05 ms) would cost more than it saves. ``bias_grad_nchw`` sums
a convolution's whole output per channel, a float64 chain of additions (latency-bound:
0.8 ms for the MNIST CNN's first convolution at batch 64); from ``_jit.PARALLEL_FROM``
elements of dy it runs one channel per thread (``_jit.by_size``), each still summed in the
same order.
"""

from numba import prange

from ._jit import by_size, njit


def _sum_rows(out, x):
    """out[f] = sum_n x[n, f] for x (N, F), out (F,) (bias gradient of a linear layer).
    Overwrites out."""
    nrow, ncol = x.shape
    if out.shape[0] != ncol:
        raise ValueError("sum_rows: out must have shape (x.shape[1],)")
    for f in prange(ncol):
        s = 0.0
        for n in range(nrow):
            s += x[n, f]
        out[f] = s


def _bias_grad_nchw(db, dy):
    """db[c] = sum_{n,h,w} dy[n, c, h, w] for dy (N, C, H, W), db (C,). Overwrites db."""
    n, c, h, w = dy.shape
    if db.shape[0] != c:
        raise ValueError("bias_grad_nchw: db must have shape (dy.shape[1],)")
    for ci in prange(c):
        s = 0.0
        for b in range(n):
            for u in range(h):
                for v in range(w):
                    s += dy[b, ci, u, v]
        db[ci] = s


def _count_nonfinite(count, x):
    """count[0] += the number of inf and NaN values in x (1-D). Adds, so that one counter
    (zeroed first) sums the checks of every gradient of a step. v - v is 0 for a finite v and
    NaN for inf or NaN, a test that needs no math library on either backend."""
    if count.shape != (1,):
        raise ValueError("count_nonfinite: count must have shape (1,)")
    found = 0
    for i in range(x.shape[0]):
        v = x[i]
        if v - v != 0:
            found += 1
    count[0] += found


sum_rows = njit(cache=True)(_sum_rows)
count_nonfinite = njit(cache=True)(_count_nonfinite)
# one channel per thread for a large dy (each channel's sum in the same order: the same bits)
bias_grad_nchw = by_size(_bias_grad_nchw, on=1)
