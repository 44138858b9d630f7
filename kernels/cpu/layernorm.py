"""Layer normalisation over the last axis of a (rows, n) view, and its two gradients.

Every row r of x (the axes before the normalised ones, flattened) is normalised on its own:

    mean[r] = sum_j x[r, j] / n
    rstd[r] = 1 / sqrt(sum_j (x[r, j] - mean[r])^2 / n + epsilon)
    xhat    = (x - mean) * rstd
    y       = xhat * scale                          (the bias is added by the caller)

    g       = dy * scale
    dx      = rstd * (g - sum_j g / n - xhat * sum_j (g * xhat) / n)     (per row)
    dscale  = sum_r dy * xhat                       (per column)

The variance is the mean of squared deviations (two passes over the row, not E[x^2] - E[x]^2,
which cancels badly when |mean| >> std). Sums run in float64 in a fixed order, each row (or
column, for dscale) owned by one loop iteration: bit-identical on every call. The per-row mean
and rstd are outputs of the forward and inputs of both gradients, so backward never recomputes
them and never needs xhat stored (the caller keeps x, 2 numbers a row, and scale). The forward
and backward_data are in-place safe (y may be x, dx may be dy): a row is read in full before it
is written. Nothing allocates. Parallel over rows (columns) from _jit.PARALLEL_FROM elements.
"""

import math

from numba import prange

from ._jit import by_size


def _layernorm_forward(y, mean, rstd, x, scale, epsilon):
    """y = (x - mean) * rstd * scale for x, y (R, N), writing mean and rstd (R,); scale (N,)."""
    rows, n = x.shape
    if y.shape != x.shape or mean.shape[0] != rows or rstd.shape[0] != rows:
        raise ValueError("layernorm_forward: y must be x's shape (R, N), mean and rstd (R,)")
    if scale.shape[0] != n or n == 0:
        raise ValueError("layernorm_forward: scale must have shape (N,), N > 0")
    for r in prange(rows):
        s = 0.0
        for j in range(n):
            s += x[r, j]
        mu = s / n
        s = 0.0
        for j in range(n):
            d = x[r, j] - mu
            s += d * d
        inv = 1.0 / math.sqrt(s / n + epsilon)
        for j in range(n):
            y[r, j] = (x[r, j] - mu) * inv * scale[j]
        mean[r] = mu
        rstd[r] = inv


def _layernorm_backward_data(dx, dy, x, mean, rstd, scale):
    """dx (R, N) from dy, x (R, N), the forward's mean, rstd (R,) and scale (N,). Writes dx."""
    rows, n = x.shape
    if dx.shape != x.shape or dy.shape != x.shape or scale.shape[0] != n:
        raise ValueError("layernorm_backward_data: dx, dy must be x's shape, scale (N,)")
    if mean.shape[0] != rows or rstd.shape[0] != rows or n == 0:
        raise ValueError("layernorm_backward_data: mean and rstd must have shape (R,), N > 0")
    for r in prange(rows):
        mu, inv = mean[r], rstd[r]
        sum_g = 0.0
        sum_gx = 0.0
        for j in range(n):
            g = dy[r, j] * scale[j]
            sum_g += g
            sum_gx += g * (x[r, j] - mu) * inv
        mean_g, mean_gx = sum_g / n, sum_gx / n
        for j in range(n):
            xhat = (x[r, j] - mu) * inv
            dx[r, j] = inv * (dy[r, j] * scale[j] - mean_g - xhat * mean_gx)


def _layernorm_backward_scale(dscale, dy, x, mean, rstd):
    """dscale[j] = sum_r dy[r, j] * xhat[r, j] for dy, x (R, N), mean, rstd (R,). Overwrites
    dscale (N,)."""
    rows, n = x.shape
    if dscale.shape[0] != n or dy.shape != x.shape:
        raise ValueError("layernorm_backward_scale: dscale must be (N,), dy x's shape (R, N)")
    if mean.shape[0] != rows or rstd.shape[0] != rows:
        raise ValueError("layernorm_backward_scale: mean and rstd must have shape (R,)")
    for j in prange(n):
        s = 0.0
        for r in range(rows):
            s += dy[r, j] * (x[r, j] - mean[r]) * rstd[r]
        dscale[j] = s


# serial below _jit.PARALLEL_FROM elements of x, one row (column) per thread above it
layernorm_forward = by_size(_layernorm_forward, on=3)
layernorm_backward_data = by_size(_layernorm_backward_data, on=2)
layernorm_backward_scale = by_size(_layernorm_backward_scale, on=2)
