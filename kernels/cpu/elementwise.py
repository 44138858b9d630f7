"""Elementwise kernels over flat arrays, plus bias addition.

Every kernel here takes 1-D contiguous arrays (the caller passes ``a.reshape(-1)``)
except the two bias kernels, which take the 2-D / 4-D output they add into.
Each output element depends only on the same element of the inputs, so all
kernels are safe in place (``out`` may be the same array as an input) and give
bit-identical results on every call. None allocates or needs a workspace.
Scalars (alpha, ratio, value) arrive as Python floats; dropout's seed as a Python int in [0, 2**63).

These kernels are memory-bound. Over a small array one core is fast enough (a ReLU over 16k
floats takes ~2 us) while waking Numba's sleeping threads costs tens of microseconds; over a
large one (a ResNet-20 activation at batch 32: 0.5M floats) one core cannot pull the bytes
fast enough, and on a 16-core machine the serial loop took as long as with 1 thread. So each
is compiled twice from one source (``_jit.by_size``): serial below ``PARALLEL_FROM`` elements,
on every thread from there. Both compute each element with the same code: the same bits.
"""

import math

import numpy as np
from numba import prange

from .. import counter_rng
from ._jit import by_size, njit

# The counter-based generator's source, compiled for the CPU (the CUDA kernels compile the same).
counter_uniform = njit(cache=True)(counter_rng.counter_uniform)


def _check_same_size(a, b):
    if a.size != b.size:
        raise ValueError("elementwise kernel: arrays must have the same number of elements")


check_same_size = njit(cache=True)(_check_same_size)


def _same_buffer(a, b):
    """Do a and b start at the same byte (an in-place call: the output IS an input)?"""
    return a.ctypes.data == b.ctypes.data


same_buffer = njit(cache=True)(_same_buffer)

# Why the in-place branches below. LLVM vectorises `out[i] = f(a[i])` only after a run-time
# check that out and a do not overlap; when the graph's plan runs a kernel in place (out IS a),
# that check fails and the loop runs one element at a time: measured 7x slower for ReLU's
# backward, 16 ms of a ResNet-20 step. A loop over the one array has nothing to check.


def _relu_forward(y, x):
    """y = max(x, 0) (NaN propagates). Writes y; in-place safe (y may be x)."""
    check_same_size(y, x)
    if same_buffer(y, x):
        for i in prange(y.size):
            v = y[i]
            y[i] = 0 if v < 0 else v
        return
    for i in prange(x.size):
        v = x[i]
        y[i] = 0 if v < 0 else v


def _relu_backward(dx, dy, y):
    """dx = dy * (y > 0), using the forward OUTPUT y so it works after an in-place forward.
    Writes dx."""
    check_same_size(dx, dy)
    check_same_size(dx, y)
    if same_buffer(dx, dy):
        for i in prange(dx.size):
            dx[i] = dx[i] if y[i] > 0 else 0
        return
    for i in prange(dy.size):
        dx[i] = dy[i] if y[i] > 0 else 0


def _sigmoid_forward(y, x):
    """y = 1/(1+exp(-x)), evaluated without overflow for large |x|. Writes y; in-place safe."""
    check_same_size(y, x)
    for i in prange(x.size):
        v = x[i]
        if v >= 0:
            y[i] = 1.0 / (1.0 + math.exp(-v))
        else:
            e = math.exp(v)
            y[i] = e / (1.0 + e)


def _sigmoid_backward(dx, dy, y):
    """dx = dy * y * (1 - y), with y the forward output. Writes dx."""
    check_same_size(dx, dy)
    check_same_size(dx, y)
    for i in prange(dy.size):
        s = y[i]
        dx[i] = dy[i] * s * (1 - s)


def _add(out, a, b):
    """out = a + b. Writes out; in-place safe."""
    check_same_size(out, a)
    check_same_size(out, b)
    if same_buffer(out, a):
        for i in prange(out.size):
            out[i] += b[i]
        return
    if same_buffer(out, b):
        for i in prange(out.size):
            out[i] += a[i]
        return
    for i in prange(out.size):
        out[i] = a[i] + b[i]


def _sub(out, a, b):
    """out = a - b. Writes out; in-place safe."""
    check_same_size(out, a)
    check_same_size(out, b)
    for i in prange(out.size):
        out[i] = a[i] - b[i]


def _mul(out, a, b):
    """out = a * b (elementwise). Writes out; in-place safe."""
    check_same_size(out, a)
    check_same_size(out, b)
    for i in prange(out.size):
        out[i] = a[i] * b[i]


def _axpy(y, alpha, x):
    """y += alpha * x. Updates y in place."""
    check_same_size(y, x)
    for i in prange(y.size):
        y[i] += alpha * x[i]


def _scale(y, alpha):
    """y *= alpha. Updates y in place."""
    for i in prange(y.size):
        y[i] *= alpha


def _fill(y, value):
    """y[:] = value. Writes y."""
    for i in prange(y.size):
        y[i] = value


def _copy(y, x):
    """y[:] = x. Writes y."""
    check_same_size(y, x)
    for i in prange(y.size):
        y[i] = x[i]


def _dropout_forward(y, mask, state, x, ratio, seed):
    """Draw number c = state[0]: u_i = counter_uniform(seed, c, i); mask_i = 0 where
    u_i < ratio, else 1/(1-ratio); y = x * mask; then state[0] = c + 1.

    Writes mask (the scale factors, kept for the backward pass), y (may be x) and the draw
    counter `state` (int64, 1 element). The mask is a pure function of (seed, c, i): the CUDA
    kernel draws the same one, and so does a replayed graph.
    """
    check_same_size(y, x)
    check_same_size(mask, x)
    keep = 1.0 / (1.0 - ratio) if ratio < 1.0 else 0.0
    key, counter = np.uint64(seed), np.uint64(state[0])
    for i in prange(x.size):
        m = 0.0 if counter_uniform(key, counter, np.uint64(i)) < ratio else keep
        mask[i] = m
        y[i] = x[i] * mask[i]
    state[0] += 1


def _increment(counter):
    """counter[0] += 1 (a 1-element array: the optimizer's step count, kept on the device)."""
    counter[0] += 1


def _dropout_backward(dx, dy, mask):
    """dx = dy * mask (mask holds the scale factors written by dropout_forward). Writes dx."""
    check_same_size(dx, dy)
    check_same_size(dx, mask)
    for i in prange(dy.size):
        dx[i] = dy[i] * mask[i]


def _add_bias_rows(y, b):
    """y[n, f] += b[f] for y (N, F), b (F,). Updates y in place."""
    if y.shape[1] != b.shape[0]:
        raise ValueError("add_bias_rows: y.shape[1] must equal b.shape[0]")
    nrow, ncol = y.shape
    for n in prange(nrow):
        for f in range(ncol):
            y[n, f] += b[f]


def _add_bias_nchw(y, b):
    """y[n, c, h, w] += b[c] for y (N, C, H, W), b (C,). Updates y in place."""
    nb, nc, nh, nw = y.shape
    if nc != b.shape[0]:
        raise ValueError("add_bias_nchw: y.shape[1] must equal b.shape[0]")
    for t in prange(nb * nc):
        n = t // nc
        c = t % nc
        bc = b[c]
        for i in range(nh):
            for j in range(nw):
                y[n, c, i, j] += bc


relu_forward = by_size(_relu_forward)
relu_backward = by_size(_relu_backward)
sigmoid_forward = by_size(_sigmoid_forward)
sigmoid_backward = by_size(_sigmoid_backward)
add = by_size(_add)
sub = by_size(_sub)
mul = by_size(_mul)
axpy = by_size(_axpy)
scale = by_size(_scale)
fill = by_size(_fill)
copy = by_size(_copy)
dropout_forward = njit(cache=True)(_dropout_forward)
increment = njit(cache=True)(_increment)
dropout_backward = by_size(_dropout_backward)
add_bias_rows = by_size(_add_bias_rows)
add_bias_nchw = by_size(_add_bias_nchw)
