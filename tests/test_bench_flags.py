"""The benchmarks' flags: a bad value is refused on one line by argparse before any work (a
zero step count ended in a ZeroDivisionError, --seconds inf ran forever, a --json path in a
missing folder failed after the whole benchmark)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize(
    "script,flags,says",
    [
        ("conv.py", ["--json", "no/such/folder/x.json"], "the folder 'no/such/folder' does not"),
        ("dist.py", ["--ranks", "0"], "argument --ranks: must be at least 1"),
        ("fingerprint.py", ["--steps", "0"], "argument --steps: must be at least 1"),
        ("offload.py", ["--skip", "budget", "link", "cache"], "skips every section"),
        ("operator_contract.py", ["--batch", "0"], "argument --batch: must be at least 1"),
        ("offload.py", ["--speeds", "0.001"], "at least 0.01 GB/s"),
        ("train.py", ["--seconds", "inf"], "argument --seconds: must be a finite number"),
    ],
)
def test_a_bad_flag_is_one_line_before_any_work(tmp_path, script, flags, says):
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert says in done.stderr.splitlines()[-1], done.stderr
