"""Local response normalisation kernels against a NumPy float64 reference, the backward
against the reference's Jacobian (adjointness), and float32; both kernels against a NumPy copy
of the kernels that stored scale for the backward, bit for bit."""

import math

import numpy as np
import pytest
from kernel_testutil import assert_adjoint, assert_close64, inner

from nnmem.kernels.cpu import lrn_backward, lrn_forward

# (shape, size, alpha, beta, k)
CASES = [
    ((2, 7, 3, 4), 5, 1e-4, 0.75, 1.0),  # AlexNet's constants
    ((1, 6, 2, 3), 5, 0.5, 0.75, 1.0),  # a large alpha: the normalisation matters
    ((2, 3, 2, 2), 5, 0.8, 0.6, 2.0),  # the window is wider than the channels
    ((1, 5, 3, 2), 4, 0.7, 0.75, 1.0),  # an even window (2 before, 1 after, as torch)
    ((2, 4, 1, 5), 1, 0.9, 0.5, 0.5),  # size 1: every channel on its own
]


def window(c, size, channels):
    lo = c - size // 2
    return max(lo, 0), min(lo + size, channels)


def ref_forward(x, size, alpha, beta, k):
    """Direct float64 loops over the channel windows (torch.nn.LocalResponseNorm's definition)."""
    c = x.shape[1]
    scale = np.empty_like(x)
    for ci in range(c):
        lo, hi = window(ci, size, c)
        scale[:, ci] = k + alpha / size * (x[:, lo:hi] ** 2).sum(axis=1)
    return x * scale**-beta, scale


def ref_jacobian_vector(x, dx, size, alpha, beta, k, h=1e-6):
    """Directional derivative of the forward at x along dx (central differences; float64)."""
    yp, _ = ref_forward(x + h * dx, size, alpha, beta, k)
    ym, _ = ref_forward(x - h * dx, size, alpha, beta, k)
    return (yp - ym) / (2 * h)


def ref_backward(dy, x, size, alpha, beta, k):
    """dx = J^T dy from the explicit Jacobian of the reference forward (no shared formula)."""
    y, scale = ref_forward(x, size, alpha, beta, k)
    n, c, hh, ww = x.shape
    dx = np.zeros_like(x)
    for ci in range(c):  # output channel
        lo, hi = window(ci, size, c)
        dx[:, ci] += dy[:, ci] * scale[:, ci] ** -beta
        # d y[ci] / d x[cj] through scale[ci], for every cj in window(ci)
        common = dy[:, ci] * x[:, ci] * (-beta) * scale[:, ci] ** (-beta - 1) * (alpha / size)
        for cj in range(lo, hi):
            dx[:, cj] += common * 2 * x[:, cj]
    return dx


def _pow(d, beta):
    """d^-beta elementwise with Python's math.pow, the C library's pow, which the compiled
    kernels call too (NumPy's own power may round otherwise)."""
    return np.vectorize(lambda v: math.pow(v, -beta), otypes=[np.float64])(d)


def kernels_storing_scale(x, dy, size, alpha, beta, k):
    """(y, dx) as the kernels computed them when the forward stored scale, in x's dtype, and
    the backward read it with x and y: each operation in the dtype those kernels used (in
    float32: the squares and dy*y/scale in float32, the window sums in float64 in channel order,
    the rest in float64, as Numba promotes a float32 beside a float64), rounded where they
    stored, so that the results are comparable bit for bit."""
    c = x.shape[1]
    d = np.empty(x.shape)  # the forward's scale before its store rounded it
    for ci in range(c):
        lo, hi = window(ci, size, c)
        sums = np.zeros(x[:, ci].shape)
        for cc in range(lo, hi):
            sums += x[:, cc] * x[:, cc]
        d[:, ci] = k + alpha / size * sums
    y = (x.astype(np.float64) * _pow(d, beta)).astype(x.dtype)
    scale = d.astype(x.dtype)
    coef = 2.0 * alpha * beta / size
    after = size // 2
    dx = np.empty_like(x)
    for ci in range(c):
        sums = np.zeros(x[:, ci].shape)
        for cc in range(max(ci + after - size + 1, 0), min(ci + after + 1, c)):
            sums += dy[:, cc] * y[:, cc] / scale[:, cc]
        own = _pow(scale[:, ci].astype(np.float64), beta)
        dx[:, ci] = dy[:, ci].astype(np.float64) * own - coef * x[:, ci].astype(np.float64) * sums
    return y, dx


def _run(x, dy, size, alpha, beta, k):
    y = np.full_like(x, np.nan)
    lrn_forward(y, x, size, alpha, beta, k)
    dx = np.full_like(x, np.nan)
    lrn_backward(dx, dy, x, y, size, alpha, beta, k)
    return y, dx


@pytest.mark.parametrize("shape,size,alpha,beta,k", CASES)
def test_forward_and_backward_against_reference(rng, shape, size, alpha, beta, k):
    x = rng.standard_normal(shape) * 2
    dy = rng.standard_normal(shape)
    y, dx = _run(x, dy, size, alpha, beta, k)
    y_ref, _ = ref_forward(x, size, alpha, beta, k)
    assert_close64(y, y_ref)
    assert_close64(dx, ref_backward(dy, x, size, alpha, beta, k))


@pytest.mark.parametrize("shape,size,alpha,beta,k", CASES[1:4])
def test_backward_is_the_adjoint_of_the_linearised_forward(rng, shape, size, alpha, beta, k):
    """<dy, J dx> == <J^T dy, dx>, J being the forward's Jacobian at x (finite differences)."""
    x = rng.standard_normal(shape)
    dy = rng.standard_normal(shape)
    direction = rng.standard_normal(shape)
    _, dx = _run(x, dy, size, alpha, beta, k)
    jv = ref_jacobian_vector(x, direction, size, alpha, beta, k)
    assert_adjoint(dy, jv, dx, direction, rtol=1e-7)  # finite differences: ~1e-9 accurate
    assert abs(inner(dy, jv)) > 1e-3  # not trivially zero


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,size,alpha,beta,k", CASES + [((2, 16, 5, 5), 5, 1e-4, 0.75, 2.0)])
def test_equal_to_the_kernels_that_stored_scale(rng, dtype, shape, size, alpha, beta, k):
    """The forward no longer stores scale and the backward takes the window sums again: y and
    dx must be what they were, bit for bit. (The rebuilt scale must be rounded to x's dtype as
    the stored one was: in float32, a backward using the float64 sums would change dx.)"""
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    y, dx = _run(x, dy, size, alpha, beta, k)
    y_before, dx_before = kernels_storing_scale(x, dy, size, alpha, beta, k)
    assert y.dtype == dx.dtype == dtype
    assert np.array_equal(y, y_before)
    assert np.array_equal(dx, dx_before)


def test_size_one_and_alpha_zero(rng):
    x = rng.standard_normal((1, 3, 2, 2))
    y, _ = _run(x, x, 1, 0.0, 0.75, 2.0)
    assert_close64(y, x * 2.0**-0.75)  # scale = k everywhere


def test_bad_arguments():
    x = np.zeros((1, 2, 2, 2))
    with pytest.raises(ValueError, match="size must be"):
        lrn_forward(np.empty_like(x), x, 0, 1e-4, 0.75, 1.0)
    with pytest.raises(ValueError, match="shape"):
        lrn_forward(np.empty((1, 2, 2, 3)), x, 5, 1e-4, 0.75, 1.0)
    with pytest.raises(ValueError, match="shape"):
        lrn_backward(np.empty_like(x), np.empty((2, 2, 2, 2)), x, x + 1, 5, 1e-4, 0.75, 1.0)
    with pytest.raises(ValueError, match="shape"):
        lrn_backward(np.empty_like(x), x, x, np.empty((1, 2, 2, 3)), 5, 1e-4, 0.75, 1.0)


def test_float32(rng):
    shape, size, alpha, beta, k = CASES[1]
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    y, dx = _run(x, dy, size, alpha, beta, k)
    assert y.dtype == dx.dtype == np.float32
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    y_ref, _ = ref_forward(x64, size, alpha, beta, k)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        dx, ref_backward(dy64, x64, size, alpha, beta, k), rtol=1e-4, atol=1e-5
    )


def test_deterministic(rng):
    x = rng.standard_normal((3, 8, 5, 6))
    dy = rng.standard_normal(x.shape)
    first = _run(x, dy, 5, 0.5, 0.75, 1.0)
    second = _run(x, dy, 5, 0.5, 0.75, 1.0)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
