"""Helpers shared by the kernel tests."""

import os

import numpy as np
import pytest

# Under NUMBA_DISABLE_JIT=1 every kernel runs as plain Python loops: still correct,
# but slow, so tests marked `heavy` are skipped there.
JIT_DISABLED = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")
heavy = pytest.mark.skipif(JIT_DISABLED, reason="too slow as plain Python (NUMBA_DISABLE_JIT=1)")

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
