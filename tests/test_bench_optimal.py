"""bench/optimal.py --quick, the optimal plan's benchmark as a smoke test: every section runs and
the last line is the JSON it documents, with figures that agree with each other (about 30 s on
2 cores). The floors themselves are timings of a shared machine: a FAIL there exits 1, which
this test allows; it checks what is measured, not how fast."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nnmem.planning import HEURISTICS, heuristic_name

BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench(folder, *flags):
    return subprocess.run(
        [sys.executable, str(BENCH / "optimal.py"), *flags],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=folder,
    )


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """(the finished process, its JSON) of one quick run."""
    folder = tmp_path_factory.mktemp("optimal")
    done = bench(folder, "--quick", "--json", "out.json")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == json.loads((folder / "out.json").read_text())
    return done, result


def test_every_floor_is_printed_and_sets_the_exit_status(quick):
    done, result = quick
    lines = result["floors"]["lines"]
    assert lines and all(line.startswith(("PASS: ", "FAIL: ")) for line in lines)
    assert all(line in done.stdout for line in lines)
    failed = [line for line in lines if line.startswith("FAIL")]
    assert result["floors"]["failed"] == len(failed)
    assert done.returncode == (1 if failed else 0)
    # never change the numbers: this floor does not depend on the machine's load
    assert any(line.startswith("PASS") and "bit for bit" in line for line in lines)


def test_the_quick_run_measures_resnet20_at_two_budgets_beside_every_heuristic(quick):
    _, result = quick
    (net,) = result["measured"]
    assert (net["model"], net["link_gbps"], net["cost_source"]) == ("ResNet-20", 2.0, "measured")
    assert net["smallest_mib"] < net["liveness_mib"]
    assert net["proven_mib"] <= net["smallest_mib"]
    heuristics = net["heuristics"]
    assert set(heuristics) == {heuristic_name(r, o) for r, o in HEURISTICS}
    for h in heuristics.values():
        # the pool planned on the recording device is the one the run's own device measured
        assert h["pool_mib"] == h["high_water_mib"] and h["identical"]
        assert 0 < h["fastest_step_ms"] <= h["measured_ms"]
    assert [row["label"] for row in net["budgets"]] == ["0.70 x liveness", "smallest"]
    for row in net["budgets"]:
        fitting = {n for n, h in heuristics.items() if h["pool_mib"] <= row["budget_mib"]}
        assert set(row["fitting_heuristics"]) == fitting
        if fitting:
            fastest = min(fitting, key=lambda n: heuristics[n]["measured_ms"])
            assert row["best_heuristic"] == fastest
        if not row["feasible"]:
            assert row["smallest_mib"] > 0
            continue
        assert row["high_water_mib"] == row["pool_mib"] <= row["budget_mib"]
        assert row["identical"] and row["recomputed"] + row["offloaded"] + row["kept"] > 0
        error = abs(row["predicted_ms"] - row["measured_ms"]) / row["measured_ms"]
        assert row["cost_model_error"] == pytest.approx(error)


def test_alexnet_and_the_solver_time_are_reported(quick):
    _, result = quick
    alexnet = result["alexnet"]
    assert alexnet["planner_outside_mib"] == alexnet["persistent_mib"]
    techniques = alexnet["techniques"]
    assert techniques["liveness"]["superneurons_mib"] == 1489.355
    assert techniques["all three"]["superneurons_mib"] == pytest.approx(886.23, abs=0.001)
    # the optimal plan at a heuristic's pool needs no more than the heuristic
    for name in ("liveness", "liveness + offload", "all three"):
        assert techniques[name]["optimal_data_mib"] <= techniques[name]["data_mib"]
    assert alexnet["optimal_smallest_data_mib"] <= techniques["all three"]["optimal_data_mib"]
    (name, solve), *_ = result["solve"].items()
    assert name == "ResNet-56" and solve["nodes"] > 0 and solve["limit_s"] == 60


@pytest.mark.parametrize(
    "flags,says",
    [
        (["--models", "lenet"], "argument --models: invalid choice: 'lenet'"),
        (["--frontier-png", "no/such/folder"], "'no/such/folder' is not a folder"),
    ],
)
def test_a_bad_flag_is_one_line_before_any_work(tmp_path, flags, says):
    done = bench(tmp_path, *flags)
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert says in done.stderr.splitlines()[-1], done.stderr
