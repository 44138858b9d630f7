"""Fixtures for the kernel tests (the kernel layer: nnmem.kernels.cpu).

Plain helper functions live in kernel_testutil.py (imported by name: pytest puts
this folder on sys.path because it has no __init__.py).
"""

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
