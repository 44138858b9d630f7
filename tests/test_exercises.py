"""The course's exercises (exercises/): each names one function of nnmem for a learner to blank
out and write again, and a pytest marker whose tests check it. Here, for every exercise, its
tests run in a pytest process of their own with that function replaced by a stub that raises
NotImplementedError (the plugin tests/exercises/exercise_stub.py), and every one of them must
fail; and, selected by their markers as the exercise pages say, they pass on nnmem as it is.

The CUDA exercise runs on Numba's CUDA simulator, which a process must choose before it
imports Numba: its stubbed run gets NUMBA_ENABLE_CUDASIM=1 (CI's simulator step runs its tests
on nnmem as it is: `NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda`). The processes run
side by side, two at a time (each spends seconds starting pytest and importing nnmem)."""

import concurrent.futures
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
from typing import NamedTuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXERCISES_DIR = ROOT / "exercises"


class Exercise(NamedTuple):
    page: str  # in exercises/
    function: str  # path:name, as the page names it
    target: str  # module:name, for exercise_stub
    tests: str  # the exercise's test file
    simulator: bool = False  # run on the CUDA simulator


EXERCISES = {
    "exercise_pool": Exercise(
        "00_first_fit.md",
        "nnmem/memory/pool.py:first_fit",
        "nnmem.memory.pool:first_fit",
        "tests/exercises/test_first_fit.py",
    ),
    "exercise_operator": Exercise(
        "01_operator.md",
        "nnmem/ops/activation.py:_Activation.forward",
        "nnmem.ops.activation:_Activation.forward",
        "tests/exercises/test_operator.py",
    ),
    "exercise_inplace": Exercise(
        "02_inplace.md",
        "nnmem/graph/liveness.py:may_write_in_place",
        "nnmem.graph.liveness:may_write_in_place",
        "tests/exercises/test_inplace.py",
    ),
    "exercise_lower_bound": Exercise(
        "03_lower_bound.md",
        "nnmem/memory/layout.py:lower_bound",
        "nnmem.memory.layout:lower_bound",
        "tests/exercises/test_lower_bound.py",
    ),
    "exercise_cuda": Exercise(
        "04_cuda_kernel.md",
        "kernels/cuda/elementwise.py:_sigmoid_forward_kernel",
        "nnmem.kernels.cuda.elementwise:_sigmoid_forward_kernel",
        "tests/cuda/test_exercise_cuda.py",
        simulator=True,
    ),
    "exercise_prefetch": Exercise(
        "05_prefetch.md",
        "nnmem/graph/offload.py:prefetch_schedule",
        "nnmem.graph.offload:prefetch_schedule",
        "tests/exercises/test_prefetch.py",
    ),
    "exercise_memory_rows": Exercise(
        "08_memory_rows.md",
        "nnmem/graph/milp.py:memory_rows",
        "nnmem.graph.milp:memory_rows",
        "tests/exercises/test_memory_rows.py",
    ),
}
ON_THE_CPU = [marker for marker, e in EXERCISES.items() if not e.simulator]
HAS_CUDA = importlib.util.find_spec("numba.cuda") is not None


def pytest_args(marker, exercise, stub):
    """The command line of a pytest process that runs `exercise`'s tests (all of the CPU
    exercises when `marker` is an expression), with its function stubbed out if `stub`."""
    files = [EXERCISES[m].tests for m in ON_THE_CPU] if marker is None else [exercise.tests]
    marker = " or ".join(ON_THE_CPU) if marker is None else marker
    # no cache (a stub's failures would become --lf's), plain asserts (rewriting them is most
    # of a process's start where bytecode is not written: PYTHONDONTWRITEBYTECODE)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--assert=plain"]
    args += ["-m", marker]
    if stub:
        args += ["-p", "exercise_stub", "--stub", exercise.target]
    return args + files


def run(args, simulator):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "tests" / "exercises")] + env.get("PYTHONPATH", "").split(os.pathsep)
    ).rstrip(os.pathsep)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def runs():
    """Every pytest process this module needs, started at once (two at a time): a dict from
    (marker or None for all CPU exercises, stubbed?) to a future of (exit status, output)."""
    wanted = [(marker, True) for marker in EXERCISES] + [(None, False)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {}
        for marker, stub in wanted:
            exercise = EXERCISES.get(marker)
            if exercise is not None and exercise.simulator and not HAS_CUDA:
                continue
            simulator = exercise is not None and exercise.simulator
            futures[marker, stub] = pool.submit(run, pytest_args(marker, exercise, stub), simulator)
        yield futures
        for future in futures.values():
            future.cancel()


def counts(output):
    """{"passed": n, "failed": n, ...} from pytest's summary line."""
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)}


def needs_cuda(marker):
    if EXERCISES[marker].simulator and not HAS_CUDA:
        pytest.skip("the CUDA exercise needs numba-cuda (pip install -e '.[cuda]')")


@pytest.mark.parametrize("marker", sorted(EXERCISES))
def test_the_exercise_fails_with_its_function_stubbed_out(runs, marker):
    needs_cuda(marker)
    status, output = runs[marker, True].result()
    found = counts(output)
    assert status == 1, f"pytest exit status {status} (5: no test selected)\n{output[-3000:]}"
    assert found.get("failed", 0) > 0 and "NotImplementedError" in output, output[-3000:]
    assert found.get("passed", 0) == 0, f"tests that pass without the function:\n{output}"


def test_the_cpu_exercises_pass_on_nnmem_as_it_is(runs):
    status, output = runs[None, False].result()
    assert status == 0, output[-3000:]
    assert counts(output).get("passed", 0) > 0 and "failed" not in counts(output)


def test_every_exercise_marker_has_an_exercise(pytestconfig):
    declared = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert {m for m in declared if m.startswith("exercise_")} == set(EXERCISES)


@pytest.mark.parametrize("marker", sorted(EXERCISES))
def test_the_exercise_page_names_its_function_tests_and_command(marker):
    exercise = EXERCISES[marker]
    page = (EXERCISES_DIR / exercise.page).read_text()
    assert f"`{exercise.function}`" in page
    assert f"-m {marker}" in page and exercise.tests.split("/")[-1] in page
    assert exercise.page in (EXERCISES_DIR / "README.md").read_text()
    path, name = exercise.function.split(":")
    source = (ROOT / path).read_text()
    assert re.search(rf"^\s*def {name.split('.')[-1]}\(", source, re.MULTILINE), exercise.function
