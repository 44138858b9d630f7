"""Every tutorial notebook runs from top to bottom and shows what it promises."""

import pathlib
import subprocess
import sys

import pytest

nbformat = pytest.importorskip("nbformat", reason='needs nbclient: pip install -e ".[test]"')
pytest.importorskip("nbclient", reason='needs nbclient: pip install -e ".[test]"')
pytest.importorskip("ipykernel", reason='needs ipykernel: pip install -e ".[test]"')

TUTORIALS = pathlib.Path(__file__).resolve().parent.parent / "tutorials"
sys.path.insert(0, str(TUTORIALS))
from runner import execute, figures, printed  # noqa: E402

# Lines each notebook must print: the claims its text makes.
EXPECTED = {
    "00_the_pool.ipynb": [
        "after b and c:  [0, 512) a, [512, 768) b, [768, 1024) c, [1024, 2048) free",
        "free a:   [0, 768) free, [768, 1024) c, [1024, 2048) free -> 2 free segments",
        "free c:   [0, 2048) free -> 1 free segment: the pool is whole again",
        "first_fit: [0, 256) e, [256, 512) free, [512, 768) b, [768, 1024) free, [1024, 2048) d",
        "best_fit : [0, 512) free, [512, 768) b, [768, 1024) e, [1024, 2048) d",
        "free bytes 512 >= request 512 > largest free block 256: fragmented = True",
        "best_fit : f served",
        "property tests passed: True",
    ],
    "01_model_api.ipynb": [
        "after Tensor(...): nothing yet         allocated        0 B",
        "allocations made by compile: 8 (the parameters)",
        "restored states equal the saved ones: True",
        "Out of pool memory: tried to allocate 2.8 MiB (2949120 bytes) for conv1:Conv2d",
    ],
    "02_graph_and_memory.ipynb": [
        "graph (serial) identical to eager: True",
        "graph (BFS) identical to eager: True",
        "arena of the plan      21.7 MiB  (1.000 x LB)",
        "allocator calls during a replay: 0",
        "relu(h) written over h: False",
        "h + relu(h) written over h: True",
        "DOT: 35 nodes for 35 operations, 61 edges",
        "fused kernel calls: 14 (BatchNorm2d+Add+ReLU, BatchNorm2d+ReLU)",
        "operations: 104 recorded, 87 after fusion",
        "ResNet-20, batch 32, liveness peak: float32 52.1 MiB, mixed precision 28.1 MiB",
        "conv1.W is float16, its master float32; loss scale 32768",
        "the overflowing step was skipped: True | weights unchanged: True | loss scale now 16384",
    ],
    "03_liveness_and_recompute.ipynb": [
        "ResNet: recomputation saves",
        "DenseNet: recomputation saves",
        "route: module1.branch1.bn -> module1.branch3_reduce.conv -> module1.branch3_reduce.bn",
        "speed       losses and parameters identical to eager: True",
        "memory      losses and parameters identical to eager: True",
        "cost-aware  losses and parameters identical to eager: True",
        "largest batch that fits 1.0 GiB:",
        "speed-centric's peak above memory-centric's: False",
        "cost-aware reaches memory-centric's peak with fewer recomputations: True",
    ],
    "05_offload.ipynb": [
        "offload='conv'",
        "offload='all' :  84 tensors offloaded, peak 17.9 MiB",
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
        "SquareSINGA  y = [1. 4. 9.]  dx = [ 2. -4.  3.]  dx.shape() = (3,)",
        "SquareNnmem  y = [1. 4. 9.]  dx = [ 2. -4.  3.]  dx.shape() = (3,)",
        "SquareSINGA: kernel calls ['forward SquareSINGA', 'backward SquareSINGA', "
        "'backward SquareSINGA'], planned peak ",
        "SquareNnmem: kernel calls ['forward SquareNnmem', 'backward SquareNnmem'], planned peak ",
    ],
    "07_concurrency.ipynb": [
        "GEMM bit-identical on every thread count: True",
        "profiling steps: ",
        "1-2   losses and states identical to 'off': True",
        "1-3   losses and states identical to 'off': True",
        "auto  losses and states identical to 'off': True",
        "losses and states identical to 'off' after co-running: True",
    ],
    "08_optimal_plan.ipynb": [
        "memory at every position whose base exceeds the cap:",
        "fits the budget: True",
        "smallest pool: of a heuristic 9.4 MiB, of the optimal plan 8.6 MiB",
        "heuristics that fit 9.0 MiB: 0",
        "above the smallest pool, no budget costs 1% of the step: True",
        "the optimal plan is at least as fast as every heuristic in its pool: True",
        "the optimal plan fits a smaller pool than every heuristic: True",
        "within the budget: True, losses identical: True",
        "memory='optimal': no plan of this step fits a budget of",
        "a MemoryError: True",
        "parameters and optimizer state unchanged: True",
    ],
    "09_bring_your_own_model.ipynb": [
        "light_resnet50: 415 nodes in the file, 176 after folding",
        "node 'head' (Hardmax, opset 17): operator Hardmax is not supported by nnmem",
        "light_resnet50 at batch 32, planned in",
        "liveness above 7 GiB, the optimal plan within it: True",
        "BERT-base, sequence 128, batch 32: 110 M parameters",
        "losses identical with offload: True",
        "imported back, outputs equal within 1e-5: True",
    ],
}


# Figures each notebook must display (stored in the notebook for a reader on the web).
FIGURES = {
    "00_the_pool.ipynb": 1,
    "02_graph_and_memory.ipynb": 2,
    "03_liveness_and_recompute.ipynb": 2,
    "05_offload.ipynb": 1,
    "07_concurrency.ipynb": 2,
    "08_optimal_plan.ipynb": 1,
    "09_bring_your_own_model.ipynb": 1,
}

# 04_numba_cuda.ipynb launches CUDA kernels: it needs a GPU or the CUDA simulator, which Numba
# chooses once, at import. tests/cuda/test_tutorial.py runs it in the CUDA test process.
CUDA_NOTEBOOKS = {"04_numba_cuda.ipynb"}
NOTEBOOKS = sorted(p for p in TUTORIALS.glob("*.ipynb") if p.name not in CUDA_NOTEBOOKS)


def check_claims(notebook, printed, figures, when):
    missing = [line for line in EXPECTED[notebook] if line not in printed]
    assert not missing, f"{notebook} ({when}) does not print: {missing}"
    assert figures >= FIGURES.get(notebook, 0), f"{notebook} ({when}): {figures} figures"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_a_kernel_and_its_stored_outputs_are_its_claims(notebook):
    """Executed in a fresh Jupyter kernel, the notebook prints its claims and draws its
    figures; the copy stored in the repository holds them too (a reader on the web sees the
    outputs of a real run: `python tutorials/runner.py NOTEBOOK --save` stores them)."""
    assert notebook.name in EXPECTED, "add the notebook's expected lines to EXPECTED"
    stored = nbformat.read(notebook, as_version=4)
    code = [cell for cell in stored.cells if cell.cell_type == "code"]
    check_claims(
        notebook.name,
        "".join(map(printed, code)),
        sum(map(figures, code)),
        "stored outputs",
    )
    fresh = [cell for cell in execute(notebook).cells if cell.cell_type == "code"]
    check_claims(notebook.name, "".join(map(printed, fresh)), sum(map(figures, fresh)), "fresh run")


def test_runner_prints_each_cell_and_stores_outputs_with_save(tmp_path):
    """`python tutorials/runner.py NOTEBOOK` prints what each code cell printed; --save stores
    the outputs, figures included; a cell that raises fails the run, naming the error."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# a tiny notebook"),
        nbformat.v4.new_code_cell("print(6 * 7)"),
        nbformat.v4.new_code_cell(
            "%matplotlib inline\n"
            "from matplotlib.figure import Figure\n"
            "figure = Figure(figsize=(2, 1))\n"
            "figure.subplots().plot([0, 1])\n"
            "figure"
        ),
    ]
    path = tmp_path / "tiny.ipynb"
    nbformat.write(notebook, path)
    runner = [sys.executable, str(TUTORIALS / "runner.py"), str(path)]
    done = subprocess.run(runner, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--- code cell 1\n42\n--- code cell 2\n" in done.stdout
    assert not nbformat.read(path, as_version=4).cells[1].outputs  # not saved
    done = subprocess.run(runner + ["--save"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    saved = nbformat.read(path, as_version=4).cells
    assert printed(saved[1]) == "42\n" and figures(saved[2]) == 1
    notebook.cells.append(nbformat.v4.new_code_cell("1 / 0"))
    nbformat.write(notebook, path)
    done = subprocess.run(runner, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "ZeroDivisionError" in done.stderr
