"""Shared test settings: Hypothesis without deadlines (JIT compilation is slow the first time),
autograd's training flag restored after every test, and the `device` fixture."""

import pytest
from hypothesis import settings

from nnmem import autograd
from nnmem import device as device_module

settings.register_profile("nnmem", deadline=None)
settings.load_profile("nnmem")


@pytest.fixture(autouse=True)
def _restore_training_flag():
    previous = autograd.training
    yield
    autograd.training = previous


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
