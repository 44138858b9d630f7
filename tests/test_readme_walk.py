"""The README walk: the quick start, each command as the READMEs write it.

A newcomer reads README.md top to bottom, then follows its links. This file reads the commands
of that first hour from the READMEs' own words and runs them, so that a README edit that breaks
a step breaks CI (`.ci/run` step 3 runs the walk in a fresh virtual environment, in a scratch
copy of the tree, right after the README's first command):

    python tests/test_readme_walk.py          # the walk: every step, stops at the first failure
    python tests/test_readme_walk.py --list   # the steps and their commands, nothing run
    python tests/test_readme_walk.py --main   # the README's first command, shortened for CI

The steps, in the order a reader meets them:
  the main command          README.md, "## Two commands" (CI: 2 batches instead of 10 epochs)
  the SINGA example program README.md, "## The SINGA example": its Python block, as `cnn.py`
  nnmem plan                README.md, "## The command line": its first `nnmem plan` line
  the memory viewer         README.md, "## The command line": its `nnmem plan ... .html` line
  a SINGA example script    examples/singa/README.md, "## Running them, small": the setup
                            lines (with the install), then train_cnn.py and mnist_cnn.py
  a notebook                tutorials/README.md: the course's install, runner.py on the first
                            notebook of its table
  an exercise               exercises/README.md: its install, the first exercise's check

Run as a script, this file uses the standard library alone: the walk starts where only `pip
install .` has run. Under pytest, the tests below check that every step still finds its
commands (quickly, installing nothing) and run the steps that need no install.
"""

import argparse
import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: How CI shortens the main command's training: two batches of one epoch, not ten epochs.
SHORT_TRAINING = "--max-batches 2 --epochs 1"


class WalkError(Exception):
    """A README no longer says what a step of the walk reads, or a step failed."""


# -- reading the READMEs ---------------------------------------------------------------------
def section(root, name, heading):
    """The text of Markdown file `name` (relative to `root`) under the line `heading` (such as
    "## The SINGA example"), up to the next heading of the same or a higher level."""
    text = (pathlib.Path(root) / name).read_text()
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    if heading not in lines:
        raise WalkError(f"{name} has no heading {heading!r}: the README walk reads a step there")
    start = lines.index(heading) + 1
    end = start
    fence = False
    while end < len(lines):
        line = lines[end]
        fence ^= line.startswith("```")  # a '#' comment in a code block is not a heading
        hashes = len(line) - len(line.lstrip("#"))
        if not fence and 0 < hashes <= level and line[hashes : hashes + 1] == " ":
            break
        end += 1
    return "\n".join(lines[start:end])


def fenced_blocks(text, language):
    """The code blocks of `text` fenced with ```language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.M | re.S)


def indented_block(text):
    """The lines of the first Markdown code block of `text` indented by four spaces, dedented
    (blank lines inside the block kept)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("    ")), None)
    if start is None:
        return []
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line[4:])
    while block and not block[-1].strip():
        block.pop()
    return block


def one(found, what, where):
    """found[0], or WalkError naming what the walk looked for and where."""
    if not found:
        raise WalkError(f"{where}: the README walk found no {what}")
    return found[0]


# -- the steps -------------------------------------------------------------------------------
@dataclasses.dataclass
class Step:
    """One step of the walk: a bash script made of the README's lines, run from the repository
    root (`in_root`) or from a scratch folder, and what its output must show."""

    name: str
    source: str  # where the commands come from: "file, heading"
    script: str
    in_root: bool = True
    files: dict = dataclasses.field(default_factory=dict)  # written before: name -> text
    expect: str = ""  # a regular expression the output must match
    leaves: tuple = ()  # (file, text): a file the step must leave behind, holding the text


def main_command(root=ROOT):
    """The README's first command, the training run shortened for CI."""
    where = "README.md, ## Two commands"
    block = one(fenced_blocks(section(root, "README.md", "## Two commands"), "bash"), "bash", where)
    command = block.strip()
    if not command.endswith("nnmem train"):
        raise WalkError(f"{where}: the first command should end with `nnmem train`: {command}")
    return f"{command} {SHORT_TRAINING}"


def singa_example_program(root=ROOT):
    """(file name, program, command) of README.md's "The SINGA example"."""
    where = "README.md, ## The SINGA example"
    text = section(root, "README.md", "## The SINGA example")
    program = one(fenced_blocks(text, "python"), "python block", where)
    prose = " ".join(text.split())
    name, command = one(
        re.findall(r"Save it as `(\w+\.py)` and run `(python \1)`", prose),
        "'Save it as `NAME.py` and run `python NAME.py`'",
        where,
    )
    return name, program, command


def steps(root=ROOT):
    """The walk after the main command (which `.ci/run` runs itself, with its own checks)."""
    name, program, command = singa_example_program(root)
    where = "README.md, ## The command line"
    command_line = fenced_blocks(section(root, "README.md", "## The command line"), "bash")
    plans = [
        re.sub(r"\s+#.*", "", line)
        for block in command_line
        for line in block.splitlines()
        if re.match(r"nnmem plan\b", line)
    ]
    plan = one(plans, "`nnmem plan` line", where)
    viewer = one([p for p in plans if re.search(r"--timeline \S+\.html$", p)], "viewer", where)
    page = viewer.split()[-1]

    where = "examples/singa/README.md, ## Running them, small"
    lines = indented_block(section(root, "examples/singa/README.md", "## Running them, small"))
    setup = lines[: lines.index("")] if "" in lines else lines
    one([line for line in setup if line.startswith("pip install ")], "install line", where)
    scripts = [
        one([line for line in lines if line.startswith(f"python $E/{script} ")], script, where)
        for script in ("cnn/train_cnn.py cnn mnist", "cnn/autograd/mnist_cnn.py")
    ]

    where = "tutorials/README.md"
    course = section(root, "tutorials/README.md", "## Running them")
    install = one(fenced_blocks(course, "bash"), "bash block", where).splitlines()[0]
    install = install.split(" && jupyter lab")[0]  # opening Jupyter is for a person
    runner = one(re.findall(r"`(python tutorials/runner\.py) NOTEBOOK`", course), "runner", where)
    table = section(root, "tutorials/README.md", "# The course: tutorials")
    notebook = one(re.findall(r"^\| `(\w+\.ipynb)` \|", table, flags=re.M), "notebook", where)

    where = "exercises/README.md"
    how = section(root, "exercises/README.md", "## How an exercise works")
    exercise_install = one(re.findall(r"`(pip install [^`]*)`", how), "install", where)
    rows = section(root, "exercises/README.md", "# The course's exercises")
    check = one(re.findall(r"^\| 1 \|.*`(python -m pytest -m exercise_\w+ [^`]*)` \|$", rows, re.M),
                "check of exercise 1", where)  # fmt: skip

    return [
        Step("the SINGA example program", "README.md, ## The SINGA example", command,
             in_root=False, files={name: program}, expect=r"epoch \d+: training loss"),
        Step("nnmem plan", "README.md, ## The command line", plan, in_root=False,
             expect=r"liveness"),
        Step("the memory viewer", "README.md, ## The command line", viewer, in_root=False,
             leaves=(page, 'id="nnmem-data"')),
        Step("a SINGA example script", "examples/singa/README.md, ## Running them, small",
             "\n".join(setup + scripts), expect=r"(?s)Training loss = .*Training loss = "),
        Step("a notebook", "tutorials/README.md, ## Running them",
             f"{install}\n{runner} tutorials/{notebook}", expect=r"--- code cell 1\n"),
        Step("an exercise", "exercises/README.md", f"{exercise_install}\n{check}",
             expect=r"\d+ passed"),
    ]  # fmt: skip


# -- running them ----------------------------------------------------------------------------
def run_step(step, scratch, root=ROOT):
    """Run one step in bash (`set -euo pipefail`) and check what it shows; returns its output.
    Temporary folders the commands make go under `scratch` (TMPDIR), which the caller
    removes."""
    cwd = pathlib.Path(root) if step.in_root else pathlib.Path(scratch) / "work"
    cwd.mkdir(exist_ok=True)
    for name, text in step.files.items():
        (cwd / name).write_text(text)
    env = dict(os.environ, TMPDIR=str(scratch), MPLBACKEND="Agg")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", step.script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = done.stdout
    failure = None
    if done.returncode != 0:
        failure = f"exit status {done.returncode}"
    elif step.expect and not re.search(step.expect, output):
        failure = f"its output does not match {step.expect!r}"
    elif step.leaves:
        name, text = step.leaves
        if not (cwd / name).is_file() or text not in (cwd / name).read_text():
            failure = f"it left no {name} holding {text!r}"
    if failure:
        raise WalkError(
            f"README walk, {step.name} ({step.source}): {failure}\n"
            f"--- the commands\n{step.script}\n--- their output (end)\n{output[-4000:]}"
        )
    return output


def walk(root=ROOT):
    """Run every step in order, printing each one's commands, output tail and time."""
    with tempfile.TemporaryDirectory(prefix="nnmem-walk-") as scratch:
        for step in steps(root):
            print(f"\n--- README walk: {step.name} ({step.source})\n{step.script}", flush=True)
            start = time.monotonic()
            output = run_step(step, scratch, root)
            tail = "\n".join(output.rstrip().splitlines()[-4:])
            print(f"{tail}\n--- {step.name}: passed in {time.monotonic() - start:.0f} s")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python tests/test_readme_walk.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="print the steps, run nothing")
    what.add_argument("--main", action="store_true", help="print the main command for CI")
    args = parser.parse_args(argv)
    try:
        if args.main:
            print(main_command())
        elif args.list:
            for step in steps():
                print(f"# {step.name} ({step.source})\n{step.script}\n")
        else:
            walk()
    except WalkError as e:
        sys.exit(str(e))


# -- the tests -------------------------------------------------------------------------------
def test_every_step_finds_its_commands_in_the_readmes():
    assert main_command().startswith("python3 -m venv .venv && . .venv/bin/activate && pip ")
    assert main_command().endswith(f"nnmem train {SHORT_TRAINING}")
    found = {step.name: step for step in steps()}
    assert list(found) == [
        "the SINGA example program",
        "nnmem plan",
        "the memory viewer",
        "a SINGA example script",
        "a notebook",
        "an exercise",
    ]
    name, program, command = singa_example_program()
    assert found["the SINGA example program"].files == {name: program}
    assert "pip install '.[examples]'" in found["a SINGA example script"].script
    assert "python $E/cnn/train_cnn.py cnn mnist" in found["a SINGA example script"].script
    assert found["a notebook"].script.startswith('pip install -e ".[notebooks]"\n')
    assert found["an exercise"].script.startswith('pip install -e ".[notebooks]"\n')


def test_a_readme_that_loses_a_step_names_what_is_missing(tmp_path):
    """The walk must be able to fail on a README edit: a renamed heading, a command gone."""
    for name in ("README.md", "examples/singa/README.md", "tutorials/README.md",
                 "exercises/README.md"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    readme = tmp_path / "examples/singa/README.md"
    readme.write_text(readme.read_text().replace("    pip install '.[examples]'", "    # gone"))
    try:
        steps(tmp_path)
    except WalkError as e:
        assert "examples/singa/README.md" in str(e) and "install line" in str(e), e
    else:
        raise AssertionError("the walk did not see the examples' install line go")
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("## The command line", "## Command line"))
    try:
        steps(tmp_path)
    except WalkError as e:
        assert "README.md has no heading '## The command line'" in str(e), e
    else:
        raise AssertionError("the walk did not see the heading go")


def test_the_plan_and_viewer_steps_run_as_the_readme_writes_them(tmp_path):
    """The two steps that need no install, with the walk's own checks (the rest need fresh
    installs: CI runs them)."""
    for step in steps():
        if step.name in ("nnmem plan", "the memory viewer"):
            run_step(step, tmp_path)
    assert (tmp_path / "work" / "plan.html").is_file()


def test_a_failing_step_is_reported_with_its_commands_and_output(tmp_path):
    step = Step("a broken step", "nowhere", "echo about to fail\nfalse", in_root=False)
    try:
        run_step(step, tmp_path)
    except WalkError as e:
        assert "a broken step (nowhere): exit status 1" in str(e)
        assert "echo about to fail\nfalse" in str(e) and "about to fail\n" in str(e)
    else:
        raise AssertionError("a failing command passed the walk")


def test_the_notebook_runner_prints_no_kernel_warning(tmp_path):
    """Jupyter's default TCP transport makes ipykernel warn, on the runner's stderr, that the
    traffic is unencrypted; the runner talks to its kernel over Unix sockets instead."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("print(6 * 7)")]
    nbformat.write(notebook, tmp_path / "tiny.ipynb")
    runner = [sys.executable, str(ROOT / "tutorials" / "runner.py"), str(tmp_path / "tiny.ipynb")]
    done = subprocess.run(runner, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "--- code cell 1\n42\n"
    assert "without encryption" not in done.stderr and "WARNING" not in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "tiny.ipynb"]  # no socket files left beside it


if __name__ == "__main__":
    main()
