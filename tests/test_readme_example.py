"""The installs the READMEs give are enough for the commands that follow them.

Each README that runs something beyond `pip install .` names an extra of pyproject.toml; the
tests read that install line from the README itself and check the extra against what the code
it runs imports (and, for SINGA's examples, the NumPy they need), so that neither the README
nor the extras can drift:
  examples/singa/README.md, "Running them, small": `pip install '.[examples]'`;
  exercises/README.md: the course's install of tutorials/README.md, `.[notebooks]`;
  README.md: `pip install '.[plot]'` wherever a `--timeline FILE.png` is shown.
`.ci/run` runs those installs for real in a fresh virtual environment (the README walk,
tests/test_readme_walk.py); these tests are the quick check.
"""

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from test_readme_walk import ROOT, fenced_blocks, section, steps

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

#: Import names whose distribution is called otherwise on PyPI.
DISTRIBUTION = {"PIL": "pillow"}

#: The first NumPy that refuses '%f' % a one-element array, as SINGA's scripts print losses.
NUMPY_REFUSES_PRINTS = Version("2.4.0")


def extras_installed_by(command):
    """The extras of `pip install [-e] '.[a,b]'` (a command of a README): {"a", "b"}."""
    found = re.fullmatch(r"""pip install (?:-e )?(["']?)\.(?:\[([\w,-]+)\])?\1(?:\s+#.*)?""",
                         command.strip())  # fmt: skip
    assert found, f"not an install of this checkout: {command!r}"
    return set(filter(None, (found[2] or "").split(",")))


def requirements(extras):
    """The requirements on this platform of nnmem with `extras`: {name: [Requirement]}."""
    listed = list(PYPROJECT["dependencies"])
    for extra in sorted(extras):
        assert extra in PYPROJECT["optional-dependencies"], f"pyproject.toml has no extra {extra}"
        listed += PYPROJECT["optional-dependencies"][extra]
    found = {}
    for text in listed:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    return found


def third_party_imports(paths, local):
    """The distributions the Python files `paths` import, but for the standard library, nnmem,
    the module names in `local`, and imports in a `try` that catches ImportError (optional
    ones, and fallbacks such as Python 2's cPickle)."""
    found = set()
    for path in paths:
        tree = ast.parse(path.read_bytes(), filename=str(path))
        guarded = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers
            ):
                guarded |= {id(n) for part in (*node.body, *node.handlers) for n in ast.walk(part)}
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "nnmem" and top not in local:
                    found.add(canonicalize_name(DISTRIBUTION.get(top, top)))
    return found


def local_modules(folder):
    """The names a script in `folder` (or below) may import from beside itself."""
    return {p.stem for p in folder.rglob("*.py")} | {
        p.name for p in folder.rglob("*") if p.is_dir()
    }


def install_line(step_name):
    """The first `pip install` line of a step of the README walk."""
    step = next(step for step in steps() if step.name == step_name)
    return next(line for line in step.script.splitlines() if line.startswith("pip install"))


# -- SINGA's examples ------------------------------------------------------------------------
def test_the_examples_install_brings_what_the_scripts_import_and_a_numpy_they_can_print_with():
    extras = extras_installed_by(install_line("a SINGA example script"))
    needed = requirements(extras)
    examples = ROOT / "examples" / "singa"
    imported = third_party_imports(sorted(examples.rglob("*.py")), local_modules(examples))
    assert {"numpy", "pillow", "matplotlib"} <= imported  # the scan sees what the scripts use
    missing = imported - set(needed)
    assert not missing, f"pip install with {sorted(extras)} leaves out {sorted(missing)}"
    for version in (NUMPY_REFUSES_PRINTS, Version("2.4.6"), Version("2.5.0"), Version("3.0")):
        allowed = all(version in requirement.specifier for requirement in needed["numpy"])
        assert not allowed, f"with {sorted(extras)}, pip may install NumPy {version}"


def test_the_examples_readme_runs_train_cnn_as_written_in_this_environment(tmp_path):
    """The README's lines for train_cnn.py, as written, in this environment, which must hold
    what the README's install brings (the install itself: CI's README walk)."""
    step = next(step for step in steps() if step.name == "a SINGA example script")
    extras = extras_installed_by(install_line(step.name))
    for name, listed in requirements(extras).items():
        version = importlib.metadata.version(name)
        for requirement in listed:
            assert requirement.specifier.contains(version, prereleases=True), (name, version)
    lines = [
        line
        for line in step.script.splitlines()
        if not line.startswith("pip install") and "mnist_cnn.py" not in line
    ]
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(lines)],
        cwd=ROOT,
        env=dict(os.environ, TMPDIR=str(tmp_path), MPLBACKEND="Agg"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    losses = [float(v) for v in re.findall(r"Training loss = ([\d.]+)", done.stdout)]
    assert len(losses) == 2 and losses[1] < losses[0], done.stdout[-2000:]


# -- the course's exercises ------------------------------------------------------------------
def test_the_exercises_need_only_the_course_install():
    course = install_line("a notebook")
    exercises = install_line("an exercise")
    assert exercises == course, "exercises/README.md should name tutorials/README.md's install"
    extras = extras_installed_by(exercises)
    tests = ROOT / "tests"
    files = [tests / "conftest.py", tests / "training.py", *sorted(tests.glob("exercises/*.py"))]
    imported = third_party_imports(files, local_modules(tests))
    assert {"pytest", "hypothesis"} <= imported
    missing = imported - set(requirements(extras))
    assert not missing, f"the exercises import {sorted(missing)}, not in {sorted(extras)}"
    text = section(ROOT, "exercises/README.md", "## How an exercise works")
    assert 'pip install -e ".[notebooks,cuda]"` for exercise 5' in " ".join(text.split())


# -- the plot extra --------------------------------------------------------------------------
def test_the_readme_names_the_plot_extra_wherever_it_shows_a_png_timeline():
    """A `--timeline FILE.png` needs Matplotlib, an optional dependency (`.html` does not)."""
    readme = (ROOT / "README.md").read_text()
    headings = [line for line in readme.splitlines() if line.startswith("## ")]
    showing = [
        h for h in headings if re.search(r"--timeline \S+\.png", section(ROOT, "README.md", h))
    ]
    assert "## The command line" in showing
    for heading in showing:
        assert "pip install '.[plot]'" in " ".join(section(ROOT, "README.md", heading).split()), (
            f"README.md, {heading}: a --timeline .png without `pip install '.[plot]'`"
        )
    block = fenced_blocks(section(ROOT, "README.md", "## The command line"), "bash")[0]
    lines = block.splitlines()
    first_png = next(i for i, line in enumerate(lines) if re.search(r"--timeline \S+\.png", line))
    assert any(line.startswith("pip install '.[plot]'") for line in lines[:first_png])
    assert "matplotlib" in requirements({"plot"})
    assert "from matplotlib" in (ROOT / "nnmem" / "memory" / "timeline.py").read_text()
