"""Tutorial 04 (Numba CUDA) runs from top to bottom and shows what it promises.

It launches CUDA kernels, so it needs a GPU or Numba's CUDA simulator, which is chosen once,
when Numba is imported: hence it runs here, in the CUDA test process
(``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda``, as .ci/run does), and not with the
other notebooks in tests/test_tutorials.py. About 20 s on the simulator, in a Jupyter kernel.
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
from runner import execute, printed  # noqa: E402

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


def code_output(notebook):
    return "".join(printed(cell) for cell in notebook.cells if cell.cell_type == "code")


def test_the_stored_notebook_holds_its_claims():
    """The copy in the repository shows a reader the outputs of a real run (on the simulator:
    `NUMBA_ENABLE_CUDASIM=1 python tutorials/runner.py tutorials/04_numba_cuda.ipynb --save`)."""
    nbformat = pytest.importorskip("nbformat", reason='needs nbclient: pip install -e ".[test]"')
    stored = code_output(nbformat.read(NOTEBOOK, as_version=4))
    missing = [line for line in EXPECTED if line not in stored]
    assert not missing, missing


@needs_device
def test_notebook_runs():
    """In a fresh Jupyter kernel, which inherits this process' environment (the simulator)."""
    pytest.importorskip("nbclient", reason='needs nbclient: pip install -e ".[test]"')
    from nnmem.kernels.cuda import _launch

    output = code_output(execute(NOTEBOOK))
    for line in EXPECTED:
        assert line in output
    assert f"@cuda.jit kernels in the registry: {len(_launch.KERNELS)} (" in output
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        assert "kernels run on: Numba's CUDA simulator" in output
        assert "driver_free_bytes: inf (the simulator has no driver to ask)" in output
    # The PTX is compiled in a child process without the simulator: it needs numba-cuda (whose
    # [cu13] wheels bring NVVM); only without it may the notebook say PTX is unavailable.
    if importlib.util.find_spec("numba_cuda") is not None:
        assert "PTX target: .target sm_80" in output
        assert "%tid.x" in output and "st.global.f32" in output
    else:
        assert "PTX unavailable: numba-cuda's compiler is missing here" in output
