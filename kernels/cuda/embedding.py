"""Embedding lookup on the GPU: the twin of kernels/cpu/embedding.py.

Forward: one thread per element of y. Backward: one thread per feature column f, which zeroes
its column of dw and adds the rows of dy in id order: the CPU's order, no atomics, so it is
deterministic and matches the CPU bit for bit. A GPU thread cannot raise: an id outside the
table is skipped (its row gets no gradient, its lookup gives NaN), where the CPU raises.
A float16 dw is summed in its own storage, as the CPU sums in its array: each addition is
taken in float32 and rounded to float16, so an id seen k times is rounded k times (the CPU's
float16 path rounds its float32 sum once).
"""

import math

from numba import cuda

from ._launch import (
    A1,
    A2,
    check_device,
    check_dtype,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)

_IDS = A1.format(T="int32")


@kernel(*each_float(f"void({A2}, {_IDS}, {A2})"))
def _forward_kernel(y, ids, w):
    t = cuda.grid(1)
    n, f = y.shape
    if t < n * f:
        i, c = t // f, t % f
        r = ids[i]
        y[i, c] = w[r, c] if 0 <= r < w.shape[0] else math.nan


@kernel(*each_float(f"void({A2}, {A2}, {_IDS})"))
def _backward_kernel(dw, dy, ids):
    c = cuda.grid(1)
    rows, f = dw.shape
    if c < f:
        for r in range(rows):
            dw[r, c] = 0
        for i in range(ids.size):
            r = ids[i]
            if 0 <= r < rows:
                dw[r, c] = widen(dw[r, c]) + widen(dy[i, c])


def _check(name, table, rows, ids):
    check_device(name, ndim=2, table=table, rows=rows)
    check_device(name, ndim=1, ids=ids)
    float_dtype(name, table=table, rows=rows)
    check_dtype(name, "int32", ids=ids)
    if rows.shape[0] != ids.size or rows.shape[1] != table.shape[1]:
        raise ValueError(f"{name}: shapes (ids.size, F) and (V, F) do not agree")


def embedding_forward(y, ids, w, *, stream=0):
    """y (N, F) = w[ids] for ids (N,) int32. Writes y."""
    _check("embedding_forward", w, y, ids)
    launch_1d(_forward_kernel, y.size, stream, y, ids, w)


def embedding_backward(dw, dy, ids, *, stream=0):
    """dw (V, F) = rows of dy summed by id. Overwrites dw."""
    _check("embedding_backward", dw, dy, ids)
    launch_1d(_backward_kernel, dw.shape[1], stream, dw, dy, ids)
