"""bench/conv.py --in-step: every convolution pass of a compiled training step timed where it
runs and alone, on the CNN (one step, one repeat: the smoke test of the measurement, not of
the speeds), and the floors' arithmetic on rows made up to sit on either side of them."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from nnmem.devices.flops import kernel_flops

BENCH = Path(__file__).resolve().parent.parent / "bench"
# bench/ is no package: its report() is loaded from the file, sys.path left as it is
_spec = importlib.util.spec_from_file_location("conv_step", BENCH / "conv_step.py")
conv_step = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conv_step)


def test_every_pass_of_the_step_is_timed_in_it_alone_and_cold(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH / "conv.py"), "--in-step", "cnn", "--steps", "1"]
        + ["--repeats", "1", "--json", "out.json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    rows = out["in_step"]
    # the SINGA CNN: conv1 needs no dx (its input is the data), conv2 all three passes
    assert [(r["layer"], r["pass"]) for r in rows] == [
        ("conv1", "forward"),
        ("conv2", "forward"),
        ("conv2", "backward data"),
        ("conv2", "backward filter"),
        ("conv1", "backward filter"),
    ]
    for row in rows:
        assert row["in_step_ms"] > 0 and row["alone_ms"] > 0 and row["cold_ms"] > 0
        assert row["algorithm"] in ("gemm", "direct")  # what "auto" kept for 5x5 filters
        assert row["flops"] == kernel_flops("x:Conv2d", row["shapes"]) > 0
    assert set(out["floors"]) == {"in the step / alone"}  # no conv3x3 pass in the CNN
    assert f"all 5 passes: {sum(r['in_step_ms'] for r in rows):.2f} ms in the step" in done.stdout


def _row(algorithm, in_step_ms, alone_ms, flops=2e9):
    return dict(
        layer="l", algorithm=algorithm, flops=flops, in_step_ms=in_step_ms, alone_ms=alone_ms,
        cold_ms=in_step_ms, **{"pass": "forward"},
    )  # fmt: skip


def test_the_floors_pass_and_fail_where_they_should(capsys):
    peak = 100.0  # GFLOP/s: 2 GFLOP in 20 ms is 100, all of it
    assert conv_step.report([_row("conv3x3", 20, 18), _row("gemm", 10, 9)], peak) == {
        "in the step / alone": True,  # 0.9 of the speed alone, both
        "conv3x3 of peak": True,
    }
    floors = conv_step.report([_row("conv3x3", 20, 17.9), _row("conv3x3", 27, 27)], peak)
    assert floors == {"in the step / alone": False, "conv3x3 of peak": False}  # 0.895; 74%
    text = capsys.readouterr().out
    assert "FAIL: every pass in the step at least 90% of its speed alone (1 of 2" in text
    assert (
        "FAIL: conv3x3's passes in the step at least 75% of the peak (1 of 2; 74% to 100%)" in text
    )
    assert conv_step.report([_row("gemm", 1, 1)], None) == {"in the step / alone": True}
