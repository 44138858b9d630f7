"""Sum reductions used for bias gradients, the block reduction the other modules share, and
the count of non-finite values that dynamic loss scaling checks gradients with.

A GPU sum cannot be one loop: it is split over the threads of a block, each summing a strided share
of the inputs (float16 ones widened as they are read) into a float64 register, and the block then
adds the per-thread partial sums in a tree in shared memory (``block_sum``). The split and the tree
are fixed by the block size, never by scheduling, so every call gives bit-identical results (which
differ from the CPU kernels' serial sums in the last bits). No atomics, no scratch memory in device
memory: each output is owned by one block, which writes it once (but count_nonfinite: an integer
count, the same whatever the order its atomic additions land in). No kernel allocates.
"""

import numpy as np
from numba import cuda, float64

from ._launch import (
    A1,
    A2,
    A3,
    REDUCE_THREADS,
    check_device,
    check_dtype,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)


@device_function
def block_sum(buf, value):
    """Sum of `value` over the threads of a 1-D block; every thread gets the total.

    `buf` is a shared float64 array with one slot per thread (blockDim.x, a power of two). Tree
    reduction with sequential addressing: at each step thread t < step adds slot t + step into
    slot t, so a warp touches consecutive words (no bank conflicts) and the active threads stay
    packed in the first warps. Every thread of the block must call it (it synchronises)."""
    t = cuda.threadIdx.x
    buf[t] = value
    cuda.syncthreads()
    step = buf.shape[0] // 2
    while step > 0:
        if t < step:
            buf[t] += buf[t + step]
        cuda.syncthreads()
        step //= 2
    total = buf[0]
    cuda.syncthreads()  # everyone has read buf[0] before a second call overwrites it
    return total


# sum_rows: a block of 32 x 8 threads owns 32 columns. threadIdx.x runs along a row, so a warp
# reads 32 consecutive elements (coalesced); threadIdx.y splits the rows 8 ways.
_COLS = 32
_ROW_SPLIT = 8


@kernel(*each_float(f"void({A1}, {A2})"))
def _sum_rows_kernel(out, x):
    """out[f] = sum_n x[n, f]. Block: 32 columns; thread (tx, ty) sums rows ty, ty+8, ... of its
    column, then the 8 partial sums of each column meet in a tree in shared memory."""
    buf = cuda.shared.array((_ROW_SPLIT, _COLS), dtype=float64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    nrow, ncol = x.shape
    f = cuda.blockIdx.x * _COLS + tx
    s = 0.0
    if f < ncol:
        for r in range(ty, nrow, _ROW_SPLIT):
            s += widen(x[r, f])
    buf[ty, tx] = s
    cuda.syncthreads()
    step = _ROW_SPLIT // 2
    while step > 0:
        if ty < step:
            buf[ty, tx] += buf[ty + step, tx]
        cuda.syncthreads()
        step //= 2
    if ty == 0 and f < ncol:
        out[f] = buf[0, tx]


@kernel(*each_float(f"void({A1}, {A3})"))
def _bias_grad_kernel(db, dy):
    """db[c] = sum_{n,s} dy[n, c, s] (dy viewed as (N, C, H*W)). One block per channel c;
    thread t sums s = t, t+T, ... of every plane (consecutive threads, consecutive addresses)."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    c = cuda.blockIdx.x
    t = cuda.threadIdx.x
    n, _, hw = dy.shape
    s = 0.0
    for b in range(n):
        for k in range(t, hw, REDUCE_THREADS):
            s += widen(dy[b, c, k])
    total = block_sum(buf, s)
    if t == 0:
        db[c] = total


def sum_rows(out, x, *, stream=0):
    """out[f] = sum_n x[n, f] for x (N, F), out (F,) (bias gradient of a linear layer).
    Overwrites out; float64 sums; one 32 x 8 block per 32 columns."""
    check_device("sum_rows", ndim=1, out=out)
    check_device("sum_rows", ndim=2, x=x)
    float_dtype("sum_rows", out=out, x=x)
    nrow, ncol = x.shape
    if out.shape[0] != ncol:
        raise ValueError("sum_rows: out must have shape (x.shape[1],)")
    if ncol > 0:
        _sum_rows_kernel[(ncol + _COLS - 1) // _COLS, (_COLS, _ROW_SPLIT), stream](out, x)


def bias_grad_nchw(db, dy, *, stream=0):
    """db[c] = sum_{n,h,w} dy[n, c, h, w] for dy (N, C, H, W), db (C,). Overwrites db;
    float64 sums; one block per channel."""
    check_device("bias_grad_nchw", ndim=1, db=db)
    check_device("bias_grad_nchw", ndim=4, dy=dy)
    float_dtype("bias_grad_nchw", db=db, dy=dy)
    n, c, h, w = dy.shape
    if db.shape[0] != c:
        raise ValueError("bias_grad_nchw: db must have shape (dy.shape[1],)")
    if c > 0:
        _bias_grad_kernel[c, REDUCE_THREADS, stream](db, dy.reshape(n, c, h * w))


@kernel(*each_float(f"void(int32[::1], {A1})"))
def _count_nonfinite_kernel(count, x):
    """One thread per element: v - v is NaN for inf and NaN, 0 for every finite v."""
    i = cuda.grid(1)
    if i < x.size:
        v = widen(x[i])
        if v - v != 0:
            cuda.atomic.add(count, 0, 1)


def count_nonfinite(count, x, *, stream=0):
    """count[0] += the number of inf and NaN values in x (1-D); count: int32, shape (1,).
    Adds, so one zeroed counter sums the checks of every gradient of a step."""
    check_device("count_nonfinite", ndim=1, count=count, x=x)
    float_dtype("count_nonfinite", x=x)
    check_dtype("count_nonfinite", np.int32, count=count)
    if count.shape != (1,):
        raise ValueError("count_nonfinite: count must have shape (1,)")
    launch_1d(_count_nonfinite_kernel, x.size, stream, count, x)
