"""Loss functions: softmax cross-entropy (class ids or target distributions) and mean squared error.

The maths is kernels/cpu/loss.py's: every loss is averaged over the batch N = x.shape[0] and
written into the 1-element device array ``loss``; the backward kernels read the upstream
gradient ``dloss`` (1 element) on the device. Softmax subtracts each row's maximum before exp,
and -log softmax[label] is log(sum exp(x - max)) - (x[label] - max): log(0) is never taken.

The batch mean is computed on the device, by ONE BLOCK: thread t handles rows t, t+T, ... (its
row's softmax is a short serial loop over the classes), keeps its share of the total in a
float64 register, and the block adds the T shares in a tree in shared memory (reduce.block_sum);
thread 0 writes the mean. Losses are tiny (N x classes), one block is plenty, and one block
needs no second pass and no scratch memory. Deterministic: a fixed split and a fixed tree.
The backward kernels are elementwise (one thread per element of dx), except the one-hot one,
which gives a warp to each row to sum its targets first.

Targets take every form the CPU kernels take: class ids (int32 or int64), and one-hot or soft rows
(N, C) of int32, int64, float16, float32 or float64, whatever the logits' float type: SINGA's Model
documentation fills an int32 tensor with one-hot rows. Both backends compute with each target
promoted to float64, so the same labels in any of these dtypes give the same numbers.

Labels (int32 or int64 class ids) outside [0, C) cannot raise on the GPU as they do on the CPU
(a kernel cannot raise, and the host never reads device memory): the forward kernel adds NaN
for such a row, so ``loss`` becomes NaN, and the backward kernel writes NaN into that row of dx.
No kernel allocates or needs a workspace; ``prob`` / ``err`` are forward outputs kept for the
backward kernel.
"""

import math

from numba import cuda, float64

from ._launch import (
    A1,
    A2,
    REDUCE_THREADS,
    ROW_THREADS,
    check_device,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)
from .reduce import block_sum

_LABELS = ("int32[::1]", "int64[::1]")  # class ids
_TARGET_DTYPES = ("int32", "int64", "float16", "float32", "float64")  # one-hot or soft rows
_TARGETS = tuple(f"{dtype}[:, ::1]" for dtype in _TARGET_DTYPES)


def _with_labels(template, labels=_LABELS):
    """The template's signature for each float dtype of the arrays and each of `labels` for {L}."""
    return tuple(s for lab in labels for s in each_float(template.replace("{L}", lab)))


@device_function
def _softmax_row(prob, x, r):
    """prob[r] = softmax(x[r]); returns (row max, log of sum exp(x[r] - max)), for one thread.

    kernels/cpu/loss.py's _softmax_row with each x widened as it is read (the identity for
    float32 and float64: their arithmetic is the CPU source's). The CPU source cannot serve a
    float16 x: its max would stay float16, and x - max and exp would run in half precision."""
    c = x.shape[1]
    mx = widen(x[r, 0])
    for k in range(1, c):
        if widen(x[r, k]) > mx:
            mx = widen(x[r, k])
    s = 0.0
    for k in range(c):
        e = math.exp(widen(x[r, k]) - mx)
        prob[r, k] = e
        s += e
    for k in range(c):
        prob[r, k] = widen(prob[r, k]) / s
    return mx, math.log(s)


@kernel(*_with_labels(f"void({A1}, {A2}, {A2}, {{L}})"))
def _sce_forward_kernel(loss, prob, x, labels):
    """One block: thread t takes rows t, t+T, ...; the block sums the row losses."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    t = cuda.threadIdx.x
    n, c = x.shape
    total = 0.0
    for r in range(t, n, REDUCE_THREADS):
        mx, lse = _softmax_row(prob, x, r)
        lab = labels[r]
        if 0 <= lab < c:
            total += lse - (widen(x[r, lab]) - mx)
        else:
            total += math.nan  # a bad label: the loss is NaN
    total = block_sum(buf, total)
    if t == 0:
        loss[0] = total / n


@kernel(*_with_labels(f"void({A2}, {A1}, {A2}, {{L}})"))
def _sce_backward_kernel(dx, dloss, prob, labels):
    """Thread i: dx[r, k] = (prob[r, k] - (k == labels[r])) * dloss[0] / N."""
    i = cuda.grid(1)
    n, c = prob.shape
    if i < n * c:
        r = i // c
        k = i % c
        lab = labels[r]
        g = widen(dloss[0]) / n
        if lab < 0 or lab >= c:
            dx[r, k] = math.nan
        else:
            onehot = 1.0 if k == lab else 0.0
            dx[r, k] = (widen(prob[r, k]) - onehot) * g


@kernel(*_with_labels(f"void({A1}, {A2}, {A2}, {{L}})", _TARGETS))
def _sce_forward_onehot_kernel(loss, prob, x, t):
    """One block: thread j takes rows j, j+T, ...; the block sums -sum_k t log softmax."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    j = cuda.threadIdx.x
    n, c = x.shape
    total = 0.0
    for r in range(j, n, REDUCE_THREADS):
        mx, lse = _softmax_row(prob, x, r)
        for k in range(c):
            tk = widen(t[r, k])
            if tk != 0:
                total -= tk * ((widen(x[r, k]) - mx) - lse)
    total = block_sum(buf, total)
    if j == 0:
        loss[0] = total / n


@kernel(*_with_labels(f"void({A2}, {A1}, {A2}, {{L}})", _TARGETS))
def _sce_backward_onehot_kernel(dx, dloss, prob, t):
    """Block r (one warp): st = sum_k t[r, k] by a block sum, then dx[r, k] for k = lane,
    lane+32, ... = (prob * st - t) * dloss[0] / N."""
    buf = cuda.shared.array(ROW_THREADS, dtype=float64)
    r = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    n, c = prob.shape
    s = 0.0
    for k in range(lane, c, ROW_THREADS):
        s += widen(t[r, k])
    st = block_sum(buf, s)
    g = widen(dloss[0]) / n
    for k in range(lane, c, ROW_THREADS):
        dx[r, k] = (widen(prob[r, k]) * st - widen(t[r, k])) * g


@kernel(*each_float(f"void({A1}, {A1}, {A1}, {A1}, int64)"))
def _mse_forward_kernel(loss, err, x, t, n):
    """One block over the flat (N*F,) arrays: thread j writes err at j, j+T, ... and sums the
    squares; the block sums the shares; loss = 0.5 * total / N."""
    buf = cuda.shared.array(REDUCE_THREADS, dtype=float64)
    j = cuda.threadIdx.x
    total = 0.0
    for i in range(j, x.size, REDUCE_THREADS):
        d = widen(x[i]) - widen(t[i])
        err[i] = d
        total += d * d
    total = block_sum(buf, total)
    if j == 0:
        loss[0] = 0.5 * total / n


@kernel(*each_float(f"void({A1}, {A1}, {A1}, int64)"))
def _mse_backward_kernel(dx, dloss, err, n):
    """Thread i: dx[i] = err[i] * dloss[0] / N (flat arrays)."""
    i = cuda.grid(1)
    if i < err.size:
        dx[i] = widen(err[i]) * (widen(dloss[0]) / n)


def _check_loss(name, loss, **arrays):
    check_device(name, ndim=1, loss=loss)
    check_device(name, ndim=2, **arrays)
    float_dtype(name, loss=loss, **arrays)
    if loss.size != 1:
        raise ValueError(f"{name}: loss / dloss must have 1 element")


def _check_targets(name, t):
    """One-hot or soft targets: a 2-D device array of a dtype the kernels take."""
    check_device(name, ndim=2, t=t)
    if t.dtype.name not in _TARGET_DTYPES:
        raise TypeError(
            f"{name}: t has dtype {t.dtype}; targets are int32, int64, float32 or float64"
        )


def _check_labels(name, labels, n):
    check_device(name, ndim=1, labels=labels)
    if labels.dtype.name not in ("int32", "int64"):
        raise TypeError(f"{name}: labels have dtype {labels.dtype}; need int32 (or int64)")
    if labels.shape != (n,):
        raise ValueError(f"{name}: need labels (N,) for N = {n} rows")


def softmax_cross_entropy_forward(loss, prob, x, labels, *, stream=0):
    """loss[0] = mean_n -log softmax(x)[n, labels[n]], prob = softmax(x) (N,C).
    Writes loss, prob. A label outside [0, C) makes loss NaN (no exception: see the module).
    One block."""
    _check_loss("softmax_cross_entropy_forward", loss, prob=prob, x=x)
    _check_labels("softmax_cross_entropy_forward", labels, x.shape[0])
    if prob.shape != x.shape:
        raise ValueError(
            "softmax_cross_entropy_forward: need x, prob (N,C), labels (N,), loss (1,)"
        )
    _sce_forward_kernel[1, REDUCE_THREADS, stream](loss, prob, x, labels)


def softmax_cross_entropy_backward(dx, dloss, prob, labels, *, stream=0):
    """dx = (prob - onehot(labels)) * dloss[0] / N. Writes dx (N,C); dx may be prob.
    A row with a label outside [0, C) gets NaN. One thread per element."""
    _check_loss("softmax_cross_entropy_backward", dloss, dx=dx, prob=prob)
    _check_labels("softmax_cross_entropy_backward", labels, prob.shape[0])
    if dx.shape != prob.shape:
        raise ValueError("softmax_cross_entropy_backward: need dx, prob (N,C), labels (N,)")
    launch_1d(_sce_backward_kernel, prob.size, stream, dx, dloss, prob, labels)


def softmax_cross_entropy_forward_onehot(loss, prob, x, t, *, stream=0):
    """loss[0] = -sum_{n,c} t[n,c] log softmax(x)[n,c] / N; prob = softmax(x).
    Writes loss, prob. One block."""
    _check_loss("softmax_cross_entropy_forward_onehot", loss, prob=prob, x=x)
    if prob.shape != x.shape or t.shape != x.shape:
        raise ValueError("softmax_cross_entropy_forward_onehot: x, prob, t must all be (N,C)")
    _check_targets("softmax_cross_entropy_forward_onehot", t)
    _sce_forward_onehot_kernel[1, REDUCE_THREADS, stream](loss, prob, x, t)


def softmax_cross_entropy_backward_onehot(dx, dloss, prob, t, *, stream=0):
    """dx = (prob * sum_c t - t) * dloss[0] / N. Writes dx (N,C); dx may be prob.
    One warp per row."""
    _check_loss("softmax_cross_entropy_backward_onehot", dloss, dx=dx, prob=prob)
    if prob.shape != t.shape or dx.shape != t.shape:
        raise ValueError("softmax_cross_entropy_backward_onehot: dx, prob, t must all be (N,C)")
    _check_targets("softmax_cross_entropy_backward_onehot", t)
    if prob.shape[0] > 0:
        _sce_backward_onehot_kernel[prob.shape[0], ROW_THREADS, stream](dx, dloss, prob, t)


def mse_forward(loss, err, x, t, *, stream=0):
    """err = x - t, loss[0] = 0.5 * sum(err^2) / N (N = x.shape[0]). Writes err (N,F) and loss.
    One block."""
    _check_loss("mse_forward", loss, err=err, x=x, t=t)
    if err.shape != x.shape or t.shape != x.shape:
        raise ValueError("mse_forward: x, t, err must all be (N,F)")
    flat = (a.reshape(-1) for a in (err, x, t))
    _mse_forward_kernel[1, REDUCE_THREADS, stream](loss, *flat, x.shape[0])


def mse_backward(dx, dloss, err, *, stream=0):
    """dx = err * dloss[0] / N. Writes dx (N,F); dx may be err. One thread per element."""
    _check_loss("mse_backward", dloss, dx=dx, err=err)
    if dx.shape != err.shape:
        raise ValueError("mse_backward: dx and err must have the same shape")
    launch_1d(
        _mse_backward_kernel, err.size, stream, dx.reshape(-1), dloss, err.reshape(-1), err.shape[0]
    )
