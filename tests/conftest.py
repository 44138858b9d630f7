"""Shared test settings: Hypothesis without deadlines (JIT compilation is slow the first time)
and how hard it searches (NNMEM_PROPERTIES), autograd's training flag restored after every test,
the `device` fixture, and `frozen_heap` (gc.collect() for a test's own objects)."""

import gc
import os

import pytest
from hypothesis import settings
from property_counts import COUNTS

from nnmem import autograd
from nnmem import device as device_module

# The Hypothesis profiles, chosen by the environment variable NNMEM_PROPERTIES. Unset: "nnmem",
# 100 examples a test and runs of 60 steps for a state machine: fast enough for CI (all the
# property tests: about 20 seconds on 2 cores). "deep": 10 times the examples, runs of 100 steps,
# for `NNMEM_PROPERTIES=deep python -m pytest -m properties`: about 200,000 random operations
# of the pool's state machine alone, under 3 minutes in all on 2 cores. A property test sizes
# itself from the loaded profile (settings.default), so both reach it.
settings.register_profile("nnmem", deadline=None, stateful_step_count=60)
settings.register_profile(
    "nnmem-deep", settings.get_profile("nnmem"), max_examples=1000, stateful_step_count=100
)
PROPERTY_PROFILES = {"": "nnmem", "deep": "nnmem-deep"}


def pytest_configure(config):
    choice = os.environ.get("NNMEM_PROPERTIES", "")
    if choice not in PROPERTY_PROFILES:
        raise pytest.UsageError(
            f"NNMEM_PROPERTIES={choice!r} is not a profile: set it to 'deep', or unset it"
        )
    settings.load_profile(PROPERTY_PROFILES[choice])


def pytest_terminal_summary(terminalreporter):
    """What the property tests checked (tests/property_counts.py), when any ran."""
    if COUNTS:
        profile = settings.get_current_profile_name()
        figures = ", ".join(f"{n:,} {kind}" for kind, n in sorted(COUNTS.items()))
        terminalreporter.write_line(f"property tests ({profile} profile): {figures}")


@pytest.fixture(autouse=True)
def _restore_training_flag():
    previous = autograd.training
    yield
    autograd.training = previous


@pytest.fixture
def frozen_heap():
    """gc.collect() over the test's own objects only. A test that collects after each of
    hundreds of failed steps (so that nothing the failed step made outlives it in a reference
    cycle before the test counts the pool's bytes) would otherwise traverse the whole
    process's heap each time: Numba's compiled code and every earlier test's objects,
    millions in a full run, about half a second a collection on 2 cores. gc.freeze() moves
    everything alive before the test into gc's permanent generation, which no collection
    traverses; what the test makes (its device, model, steps) is collected as before.
    gc.unfreeze() gives the old objects back to gc after the test."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def cuda_or_skip():
    """numba.cuda when it can run kernels here (a GPU, or the simulator: NUMBA_ENABLE_CUDASIM=1
    set before Numba is imported, as .ci/run does in a pytest process of its own); else skip."""
    cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
    if not cuda.is_available():
        pytest.skip("needs a CUDA GPU, or NUMBA_ENABLE_CUDASIM=1 (its own pytest process)")
    return cuda


@pytest.fixture(params=["cpu", "cuda"])
def device_kind(request):
    """Parametrises a device-independent test: "cpu" always, "cuda" where a GPU or the CUDA
    simulator is present (skipped otherwise, with the reason)."""
    if request.param == "cuda":
        cuda_or_skip()
    return request.param


@pytest.fixture
def device(device_kind):
    """A fresh device of each kind (see device_kind): 64 MiB pool."""
    if device_kind == "cpu":
        return device_module.create_cpu_device("64MiB")
    return device_module.create_cuda_gpu("64MiB")
