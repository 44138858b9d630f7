"""bench/device_check.sh, the one prepared GPU run, checked without a GPU: it is valid bash,
every script it runs exists and takes the flags it is given (--smoke for the GPU parts), a
GPU part without a GPU refuses in one line, and the batch search of the capacity and offload
parts finds the largest batch that fits. (bench/device_check.sh --smoke runs every part on
the CPU: about 2 minutes, too long for the suite.)"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPT = (BENCH / "device_check.sh").read_text()
PARTS = re.findall(r"\$PY (bench/\S+\.py)((?:[^\n]|\\\n)*)", SCRIPT)

sys.path.insert(0, str(BENCH))
from gpu_common import largest_batch  # noqa: E402


def test_the_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(BENCH / "device_check.sh")], capture_output=True)
    assert done.returncode == 0, done.stderr


def test_every_part_it_runs_exists_and_knows_its_flags():
    assert len(PARTS) >= 10, PARTS  # the GPU parts twice (GPU, --smoke), the CPU runs twice
    for path, flags in PARTS:
        source = (BENCH.parent / path).read_text()
        for flag in re.findall(r"--[a-z][a-z-]*", flags):
            assert f'"{flag}"' in source, f"{path} has no flag {flag}"
    smoked = {path for path, flags in PARTS if "--smoke" in flags}
    assert smoked == {"bench/gpu.py", "bench/gpu_offload.py", "bench/gpu_capacity.py"}


def test_a_gpu_part_without_a_gpu_refuses_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # a GPU or not: the simulator is refused
    done = subprocess.run(
        [sys.executable, str(BENCH / "gpu_offload.py"), "--json", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert "--smoke" in done.stderr  # it names the way to run without a GPU


@pytest.mark.parametrize("largest", [0, 1, 7, 100, 255, 300])
@pytest.mark.parametrize("guess", [1, 50, 1000])
def test_the_batch_search_finds_the_largest_batch_that_fits(largest, guess):
    asked = []

    def fits(batch):
        asked.append(batch)
        return batch <= largest

    assert largest_batch(fits, guess, cap=256) == min(largest, 256)
    assert all(1 <= b <= 256 for b in asked)  # never past the cap, never batch 0
    assert len(asked) <= 20  # galloping then bisecting: a logarithmic number of plans
