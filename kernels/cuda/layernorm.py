"""Layer normalisation on the GPU: the twins of kernels/cpu/layernorm.py (read its maths).

Rows are long (a transformer's hidden size: hundreds to thousands of features), so one block of
REDUCE_THREADS threads owns one row: thread t handles features t, t + T, ... (consecutive
threads, consecutive addresses), and the row's sums meet in a tree in shared memory
(reduce.block_sum, float64). dscale is a sum over rows: one block of 32 x 8 threads owns 32
columns, as reduce.sum_rows does. Every output is written by the block that owns it, in a fixed
order: bit-identical on every call, a few ulps from the CPU's serial sums. In-place safe as on
the CPU (a row's sums are complete, behind the block's barriers, before any of it is written).
No atomics, no allocation.
"""

import math

from numba import cuda, float64

from ._launch import (
    A1,
    A2,
    REDUCE_THREADS,
    check_device,
    each_float,
    float_dtype,
    kernel,
    widen,
)
from .reduce import block_sum

# dscale: a block owns _COLS columns; its threads' y index splits the rows _ROW_SPLIT ways
_COLS = 32
_ROW_SPLIT = 8


@kernel(*each_float(f"void({A2}, {A1}, {A1}, {A2}, {A1}, float64)"))
def _forward_kernel(y, mean, rstd, x, scale, epsilon):
    """One block per row r."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n = x.shape[1]
    s = 0.0
    for j in range(t, n, REDUCE_THREADS):
        s += widen(x[r, j])
    mu = block_sum(buf, s) / n
    s = 0.0
    for j in range(t, n, REDUCE_THREADS):
        d = widen(x[r, j]) - mu
        s += d * d
    inv = 1.0 / math.sqrt(block_sum(buf, s) / n + epsilon)
    for j in range(t, n, REDUCE_THREADS):
        y[r, j] = (widen(x[r, j]) - mu) * inv * widen(scale[j])
    if t == 0:
        mean[r] = mu
        rstd[r] = inv


@kernel(*each_float(f"void({A2}, {A2}, {A2}, {A1}, {A1}, {A1})"))
def _backward_data_kernel(dx, dy, x, mean, rstd, scale):
    """One block per row r."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n = x.shape[1]
    mu = float64(widen(mean[r]))
    inv = float64(widen(rstd[r]))
    sum_g = 0.0
    sum_gx = 0.0
    for j in range(t, n, REDUCE_THREADS):
        g = widen(dy[r, j]) * widen(scale[j])
        sum_g += g
        sum_gx += g * (widen(x[r, j]) - mu) * inv
    mean_g = block_sum(buf, sum_g) / n
    mean_gx = block_sum(buf, sum_gx) / n
    for j in range(t, n, REDUCE_THREADS):
        xhat = (widen(x[r, j]) - mu) * inv
        dx[r, j] = inv * (widen(dy[r, j]) * widen(scale[j]) - mean_g - xhat * mean_gx)


@kernel(*each_float(f"void({A1}, {A2}, {A2}, {A1}, {A1})"))
def _backward_scale_kernel(dscale, dy, x, mean, rstd):
    """Block (32, 8): 32 columns; thread (tx, ty) sums rows ty, ty + 8, ... of its column,
    then the 8 partial sums of each column meet in a tree in shared memory."""
    buf = cuda.shared.array((_ROW_SPLIT, _COLS), dtype=float64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    rows, n = x.shape
    j = cuda.blockIdx.x * _COLS + tx
    s = 0.0
    if j < n:
        for r in range(ty, rows, _ROW_SPLIT):
            s += widen(dy[r, j]) * (widen(x[r, j]) - widen(mean[r])) * widen(rstd[r])
    buf[ty, tx] = s
    cuda.syncthreads()
    step = _ROW_SPLIT // 2
    while step > 0:
        if ty < step:
            buf[ty, tx] += buf[ty + step, tx]
        cuda.syncthreads()
        step //= 2
    if ty == 0 and j < n:
        dscale[j] = buf[0, tx]


def _check(name, rows_n, per_row, per_feature):
    """Check the (R, N) arrays, the (R,) ones and the (N,) ones; return (R, N)."""
    check_device(name, ndim=2, **rows_n)
    check_device(name, ndim=1, **per_row, **per_feature)
    float_dtype(name, **rows_n, **per_row, **per_feature)
    shapes = {a.shape for a in rows_n.values()}
    if len(shapes) > 1:
        raise ValueError(f"{name}: {', '.join(rows_n)} must have the same shape (R, N)")
    rows, n = shapes.pop()
    if any(a.shape[0] != rows for a in per_row.values()):
        raise ValueError(f"{name}: {', '.join(per_row)} must have shape (R,)")
    if any(a.shape[0] != n for a in per_feature.values()):
        raise ValueError(f"{name}: {', '.join(per_feature)} must have shape (N,)")
    if n == 0 and name != "layernorm_backward_scale":
        raise ValueError(f"{name}: rows of N = 0 features cannot be normalised")
    return rows, n


def layernorm_forward(y, mean, rstd, x, scale, epsilon, *, stream=0):
    """y = (x - mean) * rstd * scale per row of x (R, N); writes y, mean and rstd (R,)."""
    rows, _ = _check("layernorm_forward", dict(y=y, x=x), dict(mean=mean, rstd=rstd),
                     dict(scale=scale))  # fmt: skip
    if rows > 0:
        _forward_kernel[rows, REDUCE_THREADS, stream](y, mean, rstd, x, scale, float(epsilon))


def layernorm_backward_data(dx, dy, x, mean, rstd, scale, *, stream=0):
    """dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale, per row. Writes dx."""
    rows, _ = _check("layernorm_backward_data", dict(dx=dx, dy=dy, x=x),
                     dict(mean=mean, rstd=rstd), dict(scale=scale))  # fmt: skip
    if rows > 0:
        _backward_data_kernel[rows, REDUCE_THREADS, stream](dx, dy, x, mean, rstd, scale)


def layernorm_backward_scale(dscale, dy, x, mean, rstd, *, stream=0):
    """dscale[j] = sum_r dy[r, j] * xhat[r, j]. Overwrites dscale (N,)."""
    _, n = _check("layernorm_backward_scale", dict(dy=dy, x=x), dict(mean=mean, rstd=rstd),
                  dict(dscale=dscale))  # fmt: skip
    if n > 0:
        blocks = (n + _COLS - 1) // _COLS
        _backward_scale_kernel[blocks, (_COLS, _ROW_SPLIT), stream](dscale, dy, x, mean, rstd)
