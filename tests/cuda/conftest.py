"""Fixtures for the CUDA kernel tests (nnmem.kernels.cuda).

Two kinds of test live here. test_ptx.py compiles every kernel to PTX (needs numba-cuda and its
NVVM, no GPU). The others run kernels, so they need a GPU or the CUDA simulator, which must be
switched on before Numba is imported: run them in a process of their own,
``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda``; elsewhere they skip with a reason.

While the kernel tests run, every launch is checked against the registry (kernels/cuda/_launch.py):
its argument types must be one of the signatures recorded for that kernel, the ones test_ptx.py
compiles. So a host function that launched with a type no PTX test covers fails here.
"""

import sys

import numpy as np
import pytest
from cuda_testutil import RUNS_KERNELS


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


class _LaunchRecorder:
    """Stands in for a kernel's dispatcher: ``kern[grid, block, stream](*args)`` notes the
    argument types, then launches the real kernel."""

    def __init__(self, kernel, seen):
        self.kernel, self.seen = kernel, seen

    def __getitem__(self, config):
        launch = self.kernel.dispatcher[config]

        def run(*args):
            self.seen.append((self.kernel, tuple(_numba_type(a) for a in args)))
            return launch(*args)

        return run


def _numba_type(value):
    import numba

    try:
        return numba.typeof(value)
    except ValueError:  # the simulator of Numba's own numba.cuda: type the array it wraps
        return numba.typeof(value._ary)


@pytest.fixture
def launches_match_the_registry(monkeypatch):
    """Every kernel launched during the test used a registered signature (the modules that run
    kernels use it for every test: ``pytest.mark.usefixtures``)."""
    if not RUNS_KERNELS:
        yield
        return
    from numba.core.sigutils import normalize_signature

    from nnmem.kernels.cuda import _launch

    seen = []
    for kernel in _launch.KERNELS.values():
        module, _, name = kernel.name.rpartition(".")
        monkeypatch.setattr(sys.modules[module], name, _LaunchRecorder(kernel, seen))
    yield
    for kernel, argtypes in seen:
        allowed = [normalize_signature(s)[0] for s in kernel.signatures]
        assert argtypes in allowed, f"{kernel.name} launched with {argtypes}, not registered"
