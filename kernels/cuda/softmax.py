"""Softmax along the middle axis of (outer, n, inner) on the GPU: the twin of
kernels/cpu/softmax.py. One thread per line (o, i): threads with consecutive i read
consecutive addresses when inner > 1; for the common inner == 1 (softmax over the last axis)
each thread walks its own row, which suits the short rows of class scores and attention. The
line's arithmetic is the CPU module's (kernels/cpu/softmax.py's _softmax_line and
_softmax_backward_line), written again with each value widened as it is read: the identity for
float32 and float64, and float32 values for float16 arrays, whose products the CPU source would
take in half precision."""

import math

from numba import cuda

from ._launch import (
    A3,
    check_device,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)


@device_function
def softmax_line(y, x, o, i):
    """y[o, :, i] = softmax(x[o, :, i]): one line, in float64."""
    n = x.shape[1]
    top = -math.inf
    for k in range(n):
        top = max(top, widen(x[o, k, i]))
    s = 0.0
    for k in range(n):
        e = math.exp(widen(x[o, k, i]) - top)
        y[o, k, i] = e
        s += e
    for k in range(n):
        y[o, k, i] = widen(y[o, k, i]) / s


@device_function
def softmax_backward_line(dx, dy, y, o, i):
    """dx[o, :, i] = y * (dy - sum(dy * y)) along one line."""
    n = y.shape[1]
    s = 0.0
    for k in range(n):
        s += widen(dy[o, k, i]) * widen(y[o, k, i])
    for k in range(n):
        dx[o, k, i] = widen(y[o, k, i]) * (widen(dy[o, k, i]) - s)


@kernel(*each_float(f"void({A3}, {A3})"))
def _forward_kernel(y, x):
    line = cuda.grid(1)
    inner = x.shape[2]
    if line < x.shape[0] * inner:
        softmax_line(y, x, line // inner, line % inner)


@kernel(*each_float(f"void({A3}, {A3}, {A3})"))
def _backward_kernel(dx, dy, y):
    line = cuda.grid(1)
    inner = y.shape[2]
    if line < y.shape[0] * inner:
        softmax_backward_line(dx, dy, y, line // inner, line % inner)


def _check(name, **arrays):
    check_device(name, ndim=3, **arrays)
    float_dtype(name, **arrays)
    if len({a.shape for a in arrays.values()}) > 1:
        raise ValueError(f"{name}: arrays must have the same shape")


def softmax_forward(y, x, *, stream=0):
    """y = softmax(x) along axis 1 of 3-D arrays (outer, n, inner). Writes y."""
    _check("softmax_forward", y=y, x=x)
    launch_1d(_forward_kernel, x.shape[0] * x.shape[2], stream, y, x)


def softmax_backward(dx, dy, y, *, stream=0):
    """dx = y * (dy - sum(dy * y)) along axis 1, from the forward output y. Writes dx."""
    _check("softmax_backward", dx=dx, dy=dy, y=y)
    launch_1d(_backward_kernel, y.shape[0] * y.shape[2], stream, dx, dy, y)
