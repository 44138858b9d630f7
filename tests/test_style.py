"""One style for the whole tree: ruff's formatter and its lint rules, as pyproject.toml sets them
(line length 100, errors, warnings, import order). Run `ruff format . && ruff check --fix .`
to fix what this finds."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None,
    reason="ruff is in the test extra: pip install -e '.[test]'",
)
@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_the_tree_follows_the_style(command):
    ruff = [sys.executable, "-m", "ruff", *command, "."]
    done = subprocess.run(ruff, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
