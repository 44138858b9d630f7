"""Local response normalisation kernels against a NumPy float64 reference, the backward
against the reference's Jacobian (adjointness), and float32."""

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


def _run(x, dy, size, alpha, beta, k):
    y = np.full_like(x, np.nan)
    scale = np.full_like(x, np.nan)
    lrn_forward(y, scale, x, size, alpha, beta, k)
    dx = np.full_like(x, np.nan)
    lrn_backward(dx, dy, x, y, scale, size, alpha, beta)
    return y, scale, dx


@pytest.mark.parametrize("shape,size,alpha,beta,k", CASES)
def test_forward_and_backward_against_reference(rng, shape, size, alpha, beta, k):
    x = rng.standard_normal(shape) * 2
    dy = rng.standard_normal(shape)
    y, scale, dx = _run(x, dy, size, alpha, beta, k)
    y_ref, scale_ref = ref_forward(x, size, alpha, beta, k)
    assert_close64(scale, scale_ref)
    assert_close64(y, y_ref)
    assert_close64(dx, ref_backward(dy, x, size, alpha, beta, k))


@pytest.mark.parametrize("shape,size,alpha,beta,k", CASES[1:4])
def test_backward_is_the_adjoint_of_the_linearised_forward(rng, shape, size, alpha, beta, k):
    """<dy, J dx> == <J^T dy, dx>, J being the forward's Jacobian at x (finite differences)."""
    x = rng.standard_normal(shape)
    dy = rng.standard_normal(shape)
    direction = rng.standard_normal(shape)
    _, _, dx = _run(x, dy, size, alpha, beta, k)
    jv = ref_jacobian_vector(x, direction, size, alpha, beta, k)
    assert_adjoint(dy, jv, dx, direction, rtol=1e-7)  # finite differences: ~1e-9 accurate
    assert abs(inner(dy, jv)) > 1e-3  # not trivially zero


def test_size_one_and_alpha_zero(rng):
    x = rng.standard_normal((1, 3, 2, 2))
    y, scale, _ = _run(x, x, 1, 0.0, 0.75, 2.0)
    np.testing.assert_array_equal(scale, 2.0)
    assert_close64(y, x * 2.0**-0.75)


def test_bad_arguments():
    x = np.zeros((1, 2, 2, 2))
    with pytest.raises(ValueError, match="size must be"):
        lrn_forward(np.empty_like(x), np.empty_like(x), x, 0, 1e-4, 0.75, 1.0)
    with pytest.raises(ValueError, match="shape"):
        lrn_forward(np.empty((1, 2, 2, 3)), np.empty_like(x), x, 5, 1e-4, 0.75, 1.0)
    with pytest.raises(ValueError, match="shape"):
        lrn_backward(np.empty_like(x), np.empty((2, 2, 2, 2)), x, x, x + 1, 5, 1e-4, 0.75)


def test_float32(rng):
    shape, size, alpha, beta, k = CASES[1]
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    y, scale, dx = _run(x, dy, size, alpha, beta, k)
    assert y.dtype == scale.dtype == dx.dtype == np.float32
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    y_ref, scale_ref = ref_forward(x64, size, alpha, beta, k)
    np.testing.assert_allclose(scale, scale_ref, rtol=1e-6)
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
