"""Tutorial 04 (Numba CUDA) runs from top to bottom and shows what it promises.

It launches CUDA kernels, so it needs a GPU or Numba's CUDA simulator, which is chosen once,
when Numba is imported: hence it runs here, in the CUDA test process
(``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda``, as .ci/run does), and not with the
other notebooks in tests/test_tutorials.py. About 15 s on the simulator.
"""

import importlib.util
import os
import pathlib
import sys

import pytest
from cuda_testutil import needs_device

TUTORIALS = pathlib.Path(__file__).resolve().parent.parent.parent / "tutorials"
NOTEBOOK = TUTORIALS / "04_numba_cuda.ipynb"
sys.path.insert(0, str(TUTORIALS))
from runner import run_notebook  # noqa: E402

# Lines the notebook must print: the claims its text makes.
EXPECTED = [
    "kernels run on: ",
    "CUDA relu equals the CPU kernel: True",
    "kernels.cuda has the names of kernels.cpu, in the same order: True",
    "CUDA matmul (tiled GEMM) equals the CPU kernel to float32 rounding: True",
    "a host array is refused: relu_forward: y is a ndarray, not a CUDA device array",
    "t at offset 0, u at offset 256 (256-byte aligned)",
    "u's first 4 floats, read from the pool's array itself: [1.5 1.5 1.5 1.5]",
    "driver_free_bytes: ",
    "after del: allocated 0 B",
    "loss on cuda equals loss on cpu (float32 tolerance): True",
    "parameters after two steps equal (float32 tolerance): True",
    "dropout masks identical on cuda and cpu: True",
    "draw counter after one draw, cuda and cpu: 1 1",
    "async copy equals the tensor: True",
    "and equals relu on the host: True",
]


@needs_device
@pytest.mark.usefixtures("launches_match_the_registry")
def test_notebook_runs():
    from nnmem.kernels.cuda import _launch

    printed = "".join(run_notebook(NOTEBOOK))
    for line in EXPECTED:
        assert line in printed
    assert f"@cuda.jit kernels in the registry: {len(_launch.KERNELS)} (" in printed
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        assert "kernels run on: Numba's CUDA simulator" in printed
        assert "driver_free_bytes: inf (the simulator has no driver to ask)" in printed
    # The PTX is compiled in a child process without the simulator: it needs numba-cuda (whose
    # [cu13] wheels bring NVVM); only without it may the notebook say PTX is unavailable.
    if importlib.util.find_spec("numba_cuda") is not None:
        assert "PTX target: .target sm_80" in printed
        assert "%tid.x" in printed and "st.global.f32" in printed
    else:
        assert "PTX unavailable: numba-cuda's compiler is missing here" in printed
