"""SINGA's own unit tests in tests/singa/ are SINGA's, byte for byte: each file's sha256 is the
one MANIFEST.json records for it at the pinned commit, and no other Python file sits there but
the conftest that points `singa` at nnmem (tests/singa/conftest.py)."""

import hashlib
import json
import pathlib

import pytest

FOLDER = pathlib.Path(__file__).resolve().parent / "singa"
MANIFEST = json.loads((FOLDER / "MANIFEST.json").read_text())
OURS = {"conftest.py"}


@pytest.mark.parametrize("name", sorted(MANIFEST["files"]))
def test_a_vendored_test_file_is_singas(name):
    digest = hashlib.sha256((FOLDER / name).read_bytes()).hexdigest()
    assert digest == MANIFEST["files"][name]["sha256"], (
        f"tests/singa/{name} differs from SINGA's {MANIFEST['files'][name]['upstream']} "
        f"(commit {MANIFEST['commit'][:8]}): change nnmem, not SINGA's test"
    )


def test_every_python_file_there_is_vendored_or_the_conftest():
    found = {p.name for p in FOLDER.glob("*.py")}
    assert found == set(MANIFEST["files"]) | OURS


def test_the_manifest_names_its_source_and_licence():
    assert MANIFEST["repository"] == "https://github.com/apache/singa"
    assert len(MANIFEST["commit"]) == 40 and MANIFEST["license"] == "Apache-2.0"
