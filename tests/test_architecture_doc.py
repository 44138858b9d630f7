"""The map of the code stays true: every `file.py:name` reference in docs/ARCHITECTURE.md (and
in the READMEs that point into the code) names a file that exists and a function, class or
method defined in it, and the map's layers are tests/test_layering.py's LAYERS, in order."""

import ast
import pathlib
import re

import pytest
from test_layering import LAYERS

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ["docs/ARCHITECTURE.md", "README.md", "exercises/README.md", "tutorials/README.md"]
REFERENCE = re.compile(r"`((?:nnmem|kernels|tests|bench)/[\w/]+\.py):([A-Za-z_][\w.]*)`")


def defined_names(path):
    """Every dotted name defined in a module: functions, classes, methods, and module-level
    assignments ("Class.method", "function", "CONSTANT")."""
    names = set()

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(prefix + node.name)
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(prefix + t.id for t in targets if isinstance(t, ast.Name))

    visit(ast.parse(path.read_text()).body, "")
    return names


def references():
    found = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        found += [(doc, m.group(1), m.group(2)) for m in REFERENCE.finditer(text)]
    return found


def test_the_architecture_document_points_into_the_code():
    assert len([r for r in references() if r[0] == "docs/ARCHITECTURE.md"]) >= 12


@pytest.mark.parametrize("doc, path, name", references(), ids=lambda v: str(v))
def test_every_reference_names_something_defined(doc, path, name):
    file = ROOT / path
    assert file.is_file(), f"{doc} names {path}, which does not exist"
    assert name in defined_names(file), f"{doc} names {path}:{name}, which {path} does not define"


def test_the_map_lists_the_layers_in_order():
    text = (ROOT / "docs/ARCHITECTURE.md").read_text()
    section = text[text.index("## Layers") :]
    section = section[: section.index("\n## ", 1)]
    positions = []
    for title, prefixes in LAYERS:
        for prefix in prefixes:
            where = section.find(f"`{prefix}`")
            assert where >= 0, f"docs/ARCHITECTURE.md's layers do not list `{prefix}` ({title})"
            positions.append(where)
    assert positions == sorted(positions), "docs/ARCHITECTURE.md lists the layers out of order"
