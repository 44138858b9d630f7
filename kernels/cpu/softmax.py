"""Softmax along one axis of a tensor viewed as (outer, n, inner).

Any axis of any tensor is the middle axis of a 3-D view of the same bytes: outer = the product
of the sizes before it, inner = after it. So one pair of kernels serves ``softmax(x, axis)``
for every axis, with no transpose:

    y[o, :, i]  = exp(x[o, :, i] - max) / sum(exp(x[o, :, i] - max))   (max: no overflow)
    dx[o, :, i] = y[o, :, i] * (dy[o, :, i] - sum_k dy[o, k, i] * y[o, k, i])

Each (o, i) line is one loop iteration, summed in float64 in a fixed order: bit-identical on
every call, in-place safe (y may be x, dx may be dy), no allocation.
"""

import math

from numba import prange

from ._jit import njit


def _softmax_line(y, x, o, i):
    """y[o, :, i] = softmax(x[o, :, i]): one line, in float64."""
    n = x.shape[1]
    top = -math.inf
    for k in range(n):
        top = max(top, x[o, k, i])
    s = 0.0
    for k in range(n):
        e = math.exp(x[o, k, i] - top)
        y[o, k, i] = e
        s += e
    for k in range(n):
        y[o, k, i] = y[o, k, i] / s


def _softmax_backward_line(dx, dy, y, o, i):
    """dx[o, :, i] = y * (dy - sum(dy * y)) along one line."""
    n = y.shape[1]
    s = 0.0
    for k in range(n):
        s += dy[o, k, i] * y[o, k, i]
    for k in range(n):
        dx[o, k, i] = y[o, k, i] * (dy[o, k, i] - s)


softmax_line = njit(cache=True)(_softmax_line)
softmax_backward_line = njit(cache=True)(_softmax_backward_line)


def _softmax_forward(y, x):
    """y = softmax(x) along axis 1 of 3-D arrays (outer, n, inner). Writes y."""
    if y.shape != x.shape:
        raise ValueError("softmax_forward: y and x must have the same shape")
    outer, _, inner = x.shape
    for line in prange(outer * inner):
        softmax_line(y, x, line // inner, line % inner)


def _softmax_backward(dx, dy, y):
    """dx = y * (dy - sum(dy * y)) along axis 1 of 3-D arrays, from the forward output y."""
    if not dx.shape == dy.shape == y.shape:
        raise ValueError("softmax_backward: dx, dy and y must have the same shape")
    outer, _, inner = y.shape
    for line in prange(outer * inner):
        softmax_backward_line(dx, dy, y, line // inner, line % inner)


softmax_forward = njit(cache=True)(_softmax_forward)
softmax_backward = njit(cache=True)(_softmax_backward)
