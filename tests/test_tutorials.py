"""Every tutorial notebook runs from top to bottom and shows what it promises."""

import pathlib
import sys

import pytest

TUTORIALS = pathlib.Path(__file__).resolve().parent.parent / "tutorials"
sys.path.insert(0, str(TUTORIALS))
from runner import run_notebook  # noqa: E402

# Lines each notebook must print: the claims its text makes.
EXPECTED = {
    "01_model_api.ipynb": [
        "after Tensor(...): nothing yet         allocated        0 B",
        "allocations made by compile: 8 (the parameters)",
        "restored states equal the saved ones: True",
        "Out of pool memory: tried to allocate 2.8 MiB (2949120 bytes) for conv1:Conv2d",
    ],
    "02_graph_and_memory.ipynb": [
        "graph (serial) identical to eager: True",
        "graph (BFS) identical to eager: True",
        "arena of the plan      34.3 MiB  (1.000 x LB)",
        "allocator calls during a replay: 0",
        "relu(h) written over h: False",
        "h + relu(h) written over h: True",
    ],
    "03_liveness_and_recompute.ipynb": [
        "ResNet: recomputation saves",
        "DenseNet: recomputation saves",
        "route: module1.branch1.conv -> module1.branch1.bn -> module1.branch1.relu",
        "speed       losses and parameters identical to eager: True",
        "memory      losses and parameters identical to eager: True",
        "cost-aware  losses and parameters identical to eager: True",
        "largest batch that fits 1.0 GiB:",
    ],
    "05_offload.ipynb": [
        "offload='conv'",
        "offload='all' :  84 tensors offloaded, peak 33.5 MiB",
        "losses identical: True",
        "sync : transfers",
        "async: transfers",
        "within the budget: True",
        "losses identical to the same workspaces without offloading: True",
        "budget 1.00 x peak:  54 hits,   0 misses,        0 B out",
    ],
    "06_singa_programs.ipynb": [
        "only the import lines differ: True",
        "exit status: 0",
        "x[0].shape: (1, 3, 4) (SINGA keeps the axis), squeezed: (3, 4)",
        "losses identical: True",
        "float16 / float32 liveness peak: 0.50",
    ],
    "07_concurrency.ipynb": [
        "GEMM bit-identical on every thread count: True",
        "profiling steps: ",
        "1-2   losses and states identical to 'off': True",
        "1-3   losses and states identical to 'off': True",
        "auto  losses and states identical to 'off': True",
        "losses and states identical to 'off' after co-running: True",
    ],
}


# 04_numba_cuda.ipynb launches CUDA kernels: it needs a GPU or the CUDA simulator, which Numba
# chooses once, at import. tests/cuda/test_tutorial.py runs it in the CUDA test process.
CUDA_NOTEBOOKS = {"04_numba_cuda.ipynb"}
NOTEBOOKS = sorted(p for p in TUTORIALS.glob("*.ipynb") if p.name not in CUDA_NOTEBOOKS)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(notebook):
    printed = "".join(run_notebook(notebook))
    assert notebook.name in EXPECTED, "add the notebook's expected lines to EXPECTED"
    for line in EXPECTED[notebook.name]:
        assert line in printed
