"""nnmem plan and what both commands share: plan's defaults are train's, an out-of-memory error
on the command line gives command-line fixes only, long searches show their progress, --version
and `python -m nnmem`, --help with descriptions and defaults, and a plan table that reads."""

import argparse
import importlib.metadata
import re
import shlex
import subprocess
import sys
import time

import pytest

import nnmem
from nnmem.cli import build_parser, flags, main, progress
from nnmem.cli import plan as plan_command
from nnmem.cli.arguments import format_shape
from nnmem.cli.plan_table import size_format
from nnmem.memory import OutOfMemory, format_bytes
from nnmem.models import create_model
from nnmem.planning import plan as plan_step

# -- plan's defaults are the step train runs ----------------------------------------------------


def test_plan_without_flags_plans_the_step_train_runs_without_flags(capsys):
    train = build_parser().parse_args(["train"])
    assert train.model == flags.DEFAULT_MODEL
    assert train.batch_size == flags.DEFAULT_BATCH and train.data == flags.DEFAULT_DATA
    assert main(["plan"]) == 0
    model = type(create_model(flags.DEFAULT_MODEL)).__name__
    shape = format_shape((flags.DEFAULT_BATCH,) + flags.DATA_SAMPLES[flags.DEFAULT_DATA])
    assert capsys.readouterr().out.startswith(f"{model}, input {shape}:")


# -- out of memory on the command line: its fixes, in flags, filled in --------------------------


def out_of_memory(capsys, argv):
    """stderr of a train run that runs out of memory (exit status 2, no traceback)."""
    assert main(["train", "--epochs", "1", "--max-batches", "1"] + argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "OutOfMemory" in err
    return err


def only_command_line_advice(err):
    """No advice in Python's terms, one list of fixes, and the nnmem plan command it names."""
    for python in ("create_cpu_device", "pool_bytes", "compile(", "offload='", "write_viewer"):
        assert python not in err, err
    assert "--model M" not in err and "CxHxW" not in err, err  # no placeholder
    assert err.count("How to fix it:") == 1, err
    return re.search(r"nnmem plan [^\n]* --timeline oom\.html", err).group(0)


def test_out_of_memory_on_the_command_line_names_the_pool_and_the_plan_of_that_run(
    capsys, tmp_path, monkeypatch
):
    err = out_of_memory(capsys, ["--pool", "1MiB"])
    assert "the request is larger" in err or "biggest live blocks" in err  # the pool's report
    needed = int(re.search(r"fits in a pool of .* \((\d+) bytes\): rerun with --pool", err)[1])
    assert f"rerun with --pool {-(-needed // 2**20)}MiB" in err
    command = only_command_line_advice(err)
    sample = format_shape(flags.DATA_SAMPLES[flags.DEFAULT_DATA])
    assert command.startswith(f"nnmem plan --model cnn --batch 64 --input {sample}")
    monkeypatch.chdir(tmp_path)  # the command, as printed, runs and writes the viewer
    assert main(shlex.split(command)[1:]) == 0
    assert (tmp_path / "oom.html").is_file()


def test_out_of_memory_under_a_budget_gives_the_budget_and_the_plan_of_that_run(capsys):
    err = out_of_memory(capsys, ["--offload", "all", "--pool", "64MiB", "--budget", "10MiB"])
    assert re.search(r"rerun with --budget \d+MiB", err), err
    command = only_command_line_advice(err)
    assert f"--offload all --budget {10 * 2**20}" in command


def test_the_python_error_keeps_its_python_advice():
    error = OutOfMemory(request=4096, free_bytes=1024, largest_free_block=1024, capacity=2048)
    assert str(error) == "\n".join(error.report() + error.advice())
    assert "create_cpu_device(pool_bytes=...)" in "\n".join(error.advice())
    assert "How to fix it" not in "\n".join(error.report())


# -- long work shows progress on stderr, on a terminal or not -----------------------------------

PROBE = re.compile(
    r"nnmem plan: probe (\d+): (\S+) at batch (\d+) \.\.\. (fits|does not fit) .+ \(\d+\.\d s\)"
)


def probes(err):
    """The probe lines of a search, in order: (number, model, batch, fits)."""
    lines = [line for line in err.splitlines() if line.startswith("nnmem plan: probe")]
    found = [PROBE.fullmatch(line) for line in lines]
    assert all(found), lines
    return [(int(m[1]), m[2], int(m[3]), m[4] == "fits") for m in found]


def test_find_batch_writes_a_line_per_probe_to_stderr_when_it_is_not_a_terminal(capsys):
    assert not sys.stderr.isatty()  # captured, as in a log file or a notebook
    assert main(["plan", "--model", "mlp", "--find-batch", "--budget", "4MiB"]) == 0
    captured = capsys.readouterr()
    batch = int(re.search(r"largest batch that fits 4\.0 MiB: (\d+)\n", captured.out)[1])
    assert captured.err.startswith("nnmem plan: searching the largest batch that fits 4.0 MiB")
    lines = probes(captured.err)
    assert [n for n, *_ in lines] == list(range(1, len(lines) + 1))
    assert len(lines) >= 4 and {fits for *_, fits in lines} == {True, False}
    assert max(b for _, _, b, fits in lines if fits) == batch
    assert min(b for _, _, b, fits in lines if not fits) == batch + 1
    assert "nnmem plan" not in captured.out  # the results alone on stdout


def test_find_depth_writes_a_line_per_probe(capsys, monkeypatch):
    monkeypatch.setattr(plan_command, "MAX_SEARCH_DEPTH", 20)
    assert main(["plan", "--model", "resnet", "--find-depth", "--budget", "1TiB"]) == 0
    lines = probes(capsys.readouterr().err)
    assert [(model, fits) for _, model, _, fits in lines][-1] == ("resnet-20", True)


def test_a_slow_step_names_its_stages_as_they_start(capsys, monkeypatch):
    monkeypatch.setattr(progress, "SLOW_SECONDS", 0.0)  # every step is slow
    assert main(["plan", "--model", "resnet"]) == 0  # (a second or so: the line has begun)
    err = capsys.readouterr().err
    stages = "recording, baseline, liveness, liveness + recompute, liveness + offload, all three"
    line = rf"nnmem plan: planning resnet-20 at batch 64 \.\.\. {re.escape(stages)}; done "
    assert re.fullmatch(line + r"\(\d+\.\d s\)\n", err), err


def test_progress_is_silent_for_quick_work_and_grows_a_stage_at_a_time_after(capsys, monkeypatch):
    monkeypatch.setattr(progress, "SLOW_SECONDS", 0.2)
    with progress.Progress("plan", "planning quick work") as p:
        p.stage("a")
    assert capsys.readouterr().err == ""
    with progress.Progress("plan", "planning slow work") as p:
        p.stage("a")
        time.sleep(0.5)  # the line begins, with the stage passed
        p.stage("b")
        p.outcome = "fits"
    assert re.fullmatch(
        r"nnmem plan: planning slow work \.\.\. a, b; fits \(0\.\d s\)\n", capsys.readouterr().err
    )
    with pytest.raises(KeyboardInterrupt), progress.Progress("plan", "probe", at_once=True):
        raise KeyboardInterrupt  # the line ends where it stands; the error says the rest
    assert capsys.readouterr().err == "nnmem plan: probe ...\n"


# -- --version, python -m nnmem ------------------------------------------------------------------


def run_python(*args):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize("module", ["nnmem", "nnmem.cli"])
def test_version_is_the_package_version(module):
    done = run_python("-m", module, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"nnmem {nnmem.__version__}\n"
    assert importlib.metadata.version("nnmem") == nnmem.__version__


def test_python_dash_m_nnmem_runs_the_command_line(capsys):
    done = run_python("-m", "nnmem", "plan", "--model", "mlp")
    assert done.returncode == 0, done.stderr
    assert main(["plan", "--model", "mlp"]) == 0
    assert done.stdout == capsys.readouterr().out
    done = run_python("-m", "nnmem", "plan", "--batch", "0")
    assert done.returncode == 2
    assert done.stderr.startswith("nnmem plan: error: argument --batch-size/--batch: must be")


# -- --help: a description for each command, and the defaults -----------------------------------


def commands():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


@pytest.mark.parametrize("name", ["train", "plan"])
def test_help_describes_each_command_and_shows_every_default(capsys, name):
    parser = commands()[name]
    assert parser.description, f"nnmem {name} --help has no description"
    assert main([name, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert " ".join(parser.description.split()) in text
    for action in parser._actions:
        default = action.default
        if not action.option_strings or default is None or default is False:
            continue  # nothing to show: a switch that is off, a value worked out later
        if default == argparse.SUPPRESS:  # --help
            continue
        shown = f"(default: {default})" in text or "default" in (action.help or "")
        assert shown, f"nnmem {name} --help does not show {action.option_strings[0]}'s default"


def test_every_plan_flag_says_what_it_does(capsys):
    for action in commands()["plan"]._actions:
        assert action.help, f"nnmem plan {action.option_strings[0]} has no help text"
    assert main(["plan", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--recompute {speed,memory,cost-aware} the recomputation policy" in out
    assert "(default: cost-aware)" in out


def test_top_level_help_names_version(capsys):
    assert main(["--help"]) == 0
    assert "--version" in capsys.readouterr().out


# -- the plan table -------------------------------------------------------------------------------

COLUMNS = ["technique", "peak", "lower bound", "tensors live at peak", "extra ops", "on host"]


def table(out):
    """The header's cells and each row's cells (split at two spaces or more)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("technique"))
    header = re.split(r" {2,}", lines[start].strip())
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        rows.append(re.split(r" {2,}", line.strip()))
    return header, rows


def in_bytes(cell):
    number, unit = cell.split()
    return float(number) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[unit]


def test_plan_table_columns_are_apart_and_counts_say_what_they_count(capsys):
    assert main(["plan", "--model", "mlp"]) == 0
    header, rows = table(capsys.readouterr().out)
    assert header == COLUMNS + ["peak at"]
    assert len(rows) == 5 and all(len(row) == len(header) for row in rows)


def test_plan_table_sizes_agree_with_fits_to_the_byte(capsys):
    """VGG-16 at batch 16 in 2.4 GiB: recomputation's peak (2481.3 MiB) does not fit and
    offloading's (2430.8 MiB) does; one decimal of GiB wrote both as 2.4 GiB."""
    argv = ["plan", "--model", "vgg16", "--batch", "16", "--budget", "2.4GiB"]
    assert main(argv) == 0
    header, rows = table(capsys.readouterr().out)
    assert header[6] == "budget 2457.6 MiB"
    verdicts = {row[6] for row in rows}
    assert verdicts == {"fits", "does not fit"}
    for row in rows:
        assert (in_bytes(row[1]) <= 2.4 * 2**30) == (row[6] == "fits"), row
    fitting = {format_bytes(in_bytes(r[1])) for r in rows if r[6] == "fits"}
    not_fitting = {format_bytes(in_bytes(r[1])) for r in rows if r[6] != "fits"}
    assert fitting & not_fitting  # the case one decimal of GiB could not tell apart


def test_size_format_tells_every_two_sizes_apart():
    mib = 2**20
    assert size_format([2047 * mib, 2049 * mib])(2047 * mib) == "2047.0 MiB"
    size = size_format([2048 * mib, 2048 * mib + 50_000])
    assert size(2048 * mib) != size(2048 * mib + 50_000)
    size = size_format([2048 * mib, 2048 * mib + 1])  # a byte apart: exact bytes
    assert size(2048 * mib + 1) == f"{2048 * mib + 1} B"
    assert size_format([3 * 2**10, 5 * 2**10])(3 * 2**10) == "3.0 KiB"


def test_find_batch_says_which_technique_it_searched_under(capsys):
    argv = ["plan", "--model", "mlp", "--find-batch", "--budget", "4MiB"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    said = re.search(
        r"searched under the technique of smallest peak at each batch: at batch (\d+), (.+) \(",
        out,
    )
    assert said, out
    header, rows = table(out)
    smallest = min(rows, key=lambda row: in_bytes(row[1]))
    assert said[2] == smallest[0]


def test_the_fused_resnet20_peak_is_the_unfused_one_and_the_line_says_so(capsys):
    """ResNet-20 at batch 32: the fused step's liveness peak is no higher than the unfused
    one's (the layout's peak-first orders; without them the fused layout landed 143 KiB above),
    and the fusion line says what the two plans say."""
    argv = ["plan", "--model", "resnet", "--depth", "20", "--input", "3x32x32"]
    assert main(argv + ["--batch-size", "32"]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if "fusion:" in s)
    peaks = [
        plan_step(
            create_model("resnet", depth=20, num_channels=3), (32, 3, 32, 32), fuse=fuse
        ).techniques[1]  # liveness
        for fuse in (True, False)
    ]
    assert peaks[0].peak_bytes == peaks[0].lower_bound_bytes == peaks[1].peak_bytes
    assert line.endswith("liveness peak the same as unfused"), line


@pytest.mark.parametrize(
    "saved, said",
    [
        (0, "the same as unfused"),
        (39 * 1024, "39.0 KiB lower than unfused"),
        (-146432, "143.0 KiB higher than unfused"),
    ],
)
def test_the_fusion_line_says_lower_or_higher_never_a_negative_saving(saved, said):
    from nnmem.cli.plan_table import fusion_peak

    assert fusion_peak(saved) == said
