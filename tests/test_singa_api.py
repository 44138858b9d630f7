"""The README's SINGA API checklist is true both ways: every name it marks supported exists in
nnmem's module of that name, and every name it marks not supported does not (so adding one
means moving it in the list)."""

import importlib
import pathlib
import re

import pytest

README = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text()
CHECKLIST = README[README.index("## SINGA API checklist") :]
MODULES = re.findall(r"^### (\w+)\n(.*?)(?=^### |\Z)", CHECKLIST, re.M | re.S)


def resolves(module, dotted):
    obj = importlib.import_module(f"nnmem.{module}")
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def names(text):
    return re.findall(r"`([\w.]+)`", text)


def test_the_checklist_covers_singas_modules():
    assert [m for m, _ in MODULES] == [
        "tensor",
        "autograd",
        "layer",
        "model",
        "opt",
        "device",
        "initializer",
        "sonnx",
        "singa_wrap",
    ]


@pytest.mark.parametrize("module, body", MODULES, ids=[m for m, _ in MODULES])
def test_supported_names_exist_and_unsupported_ones_do_not(module, body):
    supported, _, unsupported = body.partition("Not supported:")
    assert supported.startswith("Supported: ")
    listed = names(supported)
    assert len(listed) > 5
    missing = [n for n in listed if not resolves(module, n)]
    assert not missing, f"the README says nnmem.{module} has {missing}"
    refused = [n for line in unsupported.splitlines() for n in names(line.split(":")[0])]
    assert refused or unsupported.strip() == "nothing.", "list what is not supported, or: nothing."
    present = [n for n in refused if resolves(module, n)]
    assert not present, f"nnmem.{module} has {present}: move them to Supported"
