"""Helpers shared by the kernel tests."""

import numpy as np

RTOL64 = 1e-10
ATOL64 = 1e-12


def assert_close64(actual, expected, rtol=RTOL64, atol=ATOL64):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def inner(a, b):
    """<a, b> = sum(a*b), in float64."""
    return float(np.dot(np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)))


def assert_adjoint(dy, fx, ftdy, x, rtol=1e-12):
    """<dy, F(x)> == <F^T(dy), x> for a linear map F: the transposition check."""
    lhs = inner(dy, fx)
    rhs = inner(ftdy, x)
    assert abs(lhs - rhs) <= rtol * max(1.0, abs(lhs), abs(rhs)), (lhs, rhs)
