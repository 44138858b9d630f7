"""Imports only point down: every module of nnmem imports modules of its own layer or of the
layers below it, at the top of the file, and no two modules import each other (directly or
round a longer cycle). Read from the source, so a new module must be placed in LAYERS."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Top to bottom, as docs/ARCHITECTURE.md draws them.
LAYERS = [
    ("command line", ["nnmem.cli", "nnmem.__main__"]),
    ("models, data, whole-step tools", ["nnmem.models", "nnmem.data", "nnmem.planning",
                                        "nnmem.measure", "nnmem.sonnx"]),
    ("SINGA's user API", ["nnmem.model", "nnmem.step_options", "nnmem.step_cache", "nnmem.undo",
                          "nnmem.layer", "nnmem.layers", "nnmem.opt", "nnmem.optim",
                          "nnmem.checkpoint", "nnmem.singa_wrap", "nnmem.initializer"]),
    ("data parallelism", ["nnmem.dist_opt", "nnmem.dist", "nnmem.communicator"]),
    ("autograd", ["nnmem.autograd"]),
    ("operators", ["nnmem.ops"]),
    ("the Operator base", ["nnmem.operation"]),
    ("graph", ["nnmem.graph"]),
    ("tensor", ["nnmem.tensor"]),
    ("device", ["nnmem.device", "nnmem.devices"]),
    ("bounded zip reading, atomic writing", ["nnmem.zip_io"]),  # its messages: format_bytes
    ("memory", ["nnmem.memory"]),
    ("leaves", ["nnmem.kernels", "nnmem.interrupts", "nnmem.search", "nnmem.regular_file",
                "nnmem.version"]),
]  # fmt: skip


def modules():
    """{module name: path} for nnmem/ and kernels/ (installed as nnmem.kernels)."""
    found = {}
    for folder, package in ((ROOT / "nnmem", "nnmem"), (ROOT / "kernels", "nnmem.kernels")):
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package,) + parts)] = path
    return found


def imports(name, path, known):
    """[(imported nnmem module, line, at top level?)] of one module."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = set(map(id, tree.body))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from nnmem import tensor` imports the module nnmem.tensor, not the package.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]  # fmt: skip
        else:
            continue
        for target in targets:
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known and target != name:
                found.append((target, node.lineno, id(node) in top))
    return found


def layer_of(name):
    for depth, (_, prefixes) in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return depth
    return None


def test_every_module_has_a_layer():
    unplaced = [name for name in modules() if name != "nnmem" and layer_of(name) is None]
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"


#: The imports allowed inside a function: modules that need an optional dependency, imported
#: only when used. nnmem.devices.cuda needs numba-cuda (the `cuda` extra), slow to import and
#: useless without a GPU, so create_cuda_gpu imports it, not `import nnmem`.
LAZY = {("nnmem.device", "nnmem.devices.cuda")}


def test_imports_point_down_and_sit_at_the_top():
    known = modules()
    wrong, lazy = [], set()
    for name, path in known.items():
        if name == "nnmem":  # the package itself gathers SINGA's modules
            continue
        for target, line, at_top in imports(name, path, known):
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            if target == "nnmem" or layer_of(target) < layer_of(name):
                wrong.append(f"{where}, a layer above it")
            elif not at_top and (name, target) in LAZY:
                lazy.add((name, target))
            elif not at_top:
                wrong.append(f"{where} inside a function: import it at the top")
    assert not wrong, "\n".join(wrong)
    assert lazy == LAZY, f"LAZY lists imports that are no longer lazy: {LAZY - lazy}"


def cycles(known):
    """Import cycles among the modules, each as "a -> b -> a"."""
    edges = {name: {t for t, _, _ in imports(name, path, known)} for name, path in known.items()}
    # A package's __init__ re-exporting its own modules is not a cycle of design.
    for name in edges:
        edges[name] = {t for t in edges[name] if not name.startswith(t + ".")}
    state, found = {}, []

    def visit(name, trail):
        state[name] = "open"
        for target in sorted(edges[name]):
            if state.get(target) == "open":
                found.append(" -> ".join(trail[trail.index(target) :] + [target]))
            elif target not in state:
                visit(target, trail + [target])
        state[name] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    return found


def test_no_import_cycles():
    found = cycles(modules())
    assert not found, "\n".join(found)


def test_the_checker_sees_an_upward_import_and_a_cycle(tmp_path, monkeypatch):
    """The checks above must be able to fail: planted faults are found."""
    (tmp_path / "nnmem" / "memory").mkdir(parents=True)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "nnmem" / "memory" / "bad.py").write_text("from nnmem import model\n")
    (tmp_path / "nnmem" / "model.py").write_text("def f():\n    from nnmem import layer\n")
    (tmp_path / "nnmem" / "layer.py").write_text("import nnmem.model\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    known = modules()
    assert imports("nnmem.memory.bad", known["nnmem.memory.bad"], known) == [
        ("nnmem.model", 1, True)
    ]
    assert layer_of("nnmem.model") < layer_of("nnmem.memory.bad")
    assert imports("nnmem.model", known["nnmem.model"], known) == [("nnmem.layer", 2, False)]
    assert cycles(known) == ["nnmem.layer -> nnmem.model -> nnmem.layer"]
