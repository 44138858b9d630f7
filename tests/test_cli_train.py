"""nnmem train as a newcomer meets it: it says when kernels compile and keeps that time out of
its speed, ends with a summary, takes --recompute, resumes from its checkpoints to the bit,
offers only the models it can train, and says what --concurrency auto chose."""

import io
import json
import os
import re
import subprocess
import sys
import time
import zipfile

import numba
import numpy as np
import pytest

from nnmem import device, opt, tensor
from nnmem.cli import main
from nnmem.cli import train as train_command
from nnmem.cli.resume import DROPOUT_COUNTER, EPOCHS_DONE, STEP_COUNTER, Saver, resume
from nnmem.cli.train_report import COMPILING, CompileWatch, Speed, concurrency_line
from nnmem.model import Model
from nnmem.models import MODELS, create_model

QUICK = ["--epochs", "1", "--max-batches", "3", "--batch-size", "32"]


def one_line_error(capsys):
    """The single line a failed command wrote to stderr (asserting there is exactly one)."""
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def epoch_lines(out):
    return [line for line in out.splitlines() if line.startswith("epoch ")]


# -- kernels compiling: said once, on stderr, and kept out of images/s ------------------------


def run_in_fresh_process(argv, cache):
    """`nnmem ARGV` in a new interpreter whose Numba cache is the folder `cache`."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    return subprocess.run(
        [sys.executable, "-m", "nnmem.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_cold_cache_says_kernels_compile_and_a_warm_one_does_not(tmp_path):
    argv = ["train", "--model", "mlp", *QUICK]
    cold = run_in_fresh_process(argv, tmp_path / "cache")
    assert cold.returncode == 0, cold.stderr
    assert cold.stderr.count(COMPILING) == 1, cold.stderr
    assert len(epoch_lines(cold.stdout)) == 1
    warm = run_in_fresh_process(argv, tmp_path / "cache")
    assert warm.returncode == 0, warm.stderr
    assert COMPILING not in warm.stderr and "compil" not in warm.stderr.lower(), warm.stderr


def test_compile_watch_hears_real_compilations_only_and_says_so_once():
    said = []

    def first(x):
        return x + 1

    def second(x):
        return x * 2

    with CompileWatch(said.append) as watch:
        numba.njit(first)(1)
        numba.njit(second)(1)
        compiled = watch.compiles
        numba.njit(first)  # a new dispatcher, not called: nothing compiles
    assert said == [COMPILING] and compiled == 2 == watch.compiles
    numba.njit(first)(2)  # after the watch: not heard
    assert watch.compiles == 2


def test_speed_leaves_out_the_first_batch_and_the_batches_that_compile():
    speed = Speed(images_per_batch=10)
    speed.batch(5.0, compiled=False)  # the run's first: sets the step up
    speed.batch(0.1, compiled=False)
    speed.batch(3.0, compiled=True)
    speed.batch(0.1, compiled=False)
    assert speed.report() == "100 images/s"
    speed.batch(0.5, compiled=False)  # the next epoch: its first batch counts
    assert speed.report() == "20 images/s"
    assert "not measured" in speed.report()


def test_epoch_one_images_per_second_leaves_out_the_slow_first_batch(capsys, monkeypatch):
    """A first batch that takes 1.5 s (as compiling does) would make epoch 1 report at most
    96 / 1.5 = 64 images/s; the two batches after it take milliseconds."""
    calls = []

    def slow_first(self, *args, **kwargs):
        if self.training and not calls:
            time.sleep(1.5)
        calls.append(self.training)
        return original(self, *args, **kwargs)

    original = Model.__call__
    monkeypatch.setattr(Model, "__call__", slow_first)
    assert main(["train", *QUICK]) == 0
    (line,) = epoch_lines(capsys.readouterr().out)
    rate = int(re.search(r"(\d+) images/s", line).group(1))
    assert rate > 100, line


# -- the summary at the end ---------------------------------------------------------------


def test_train_ends_with_a_summary(capsys, tmp_path):
    states = tmp_path / "cnn.zip"
    argv = ["train", "--epochs", "3", "--max-batches", "3", "--batch-size", "32"]
    assert main([*argv, "--save-states", str(states)]) == 0
    lines = capsys.readouterr().out.splitlines()
    epochs = [
        re.search(r"accuracy (\S+) .* memory (.*)$", line) for line in epoch_lines("\n".join(lines))
    ]
    accuracies = [float(m.group(1)) for m in epochs]
    best = accuracies.index(max(accuracies))
    peaks = [m.group(2) for m in epochs]
    summary = re.fullmatch(
        r"done: epochs 1-3 in (\d+\.\d) s, best test accuracy (\S+) \(epoch (\d+)\), peak pool "
        r"memory (.*), states in (.*)",
        lines[-1],
    )
    assert summary, lines[-1]
    assert 0 < float(summary.group(1)) < 600
    assert float(summary.group(2)) == accuracies[best] and int(summary.group(3)) == best + 1
    assert summary.group(4) in peaks and summary.group(5) == str(states)


# -- --recompute ---------------------------------------------------------------------------


def read_checkpoint(path):
    """{name: array} of every state (model and auxiliary) in a checkpoint."""
    with zipfile.ZipFile(path) as zf:
        with np.load(io.BytesIO(zf.read("tensor_dict.npz"))) as npz:
            return {name: npz[name] for name in npz.files}, json.loads(zf.read("states_attr.json"))


def test_train_recomputes_as_asked_and_trains_the_same_bits(capsys, tmp_path, monkeypatch):
    asked = []
    original = Model.compile

    def compile_(self, *args, **kwargs):
        asked.append(kwargs.get("recompute"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Model, "compile", compile_)
    for policy in ("none", "memory"):
        argv = ["train", *QUICK, "--recompute", policy, "--save-states", str(tmp_path / policy)]
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert asked == ["none", "memory"] and ", recompute memory" in out
    plain, _ = read_checkpoint(tmp_path / "none")
    recomputed, _ = read_checkpoint(tmp_path / "memory")
    for name, array in plain.items():
        np.testing.assert_array_equal(recomputed[name], array, err_msg=name)


def test_recompute_needs_graph_mode(capsys, monkeypatch):
    monkeypatch.setattr(train_command, "load", lambda data: pytest.fail("loaded the data"))
    assert main(["train", "--recompute", "speed", "--no-graph"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: error: argument --recompute:") and "--no-graph" in line


# -- --save-states and --resume ------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--model", "mlp", "--no-graph"]])
def test_a_resumed_run_ends_with_the_bits_of_an_unbroken_one(capsys, tmp_path, extra):
    """2 epochs in one run, or 1 epoch then --resume for the 2nd: the same parameters, momenta,
    step counter and epochs done, bit for bit (each epoch's shuffle is the same: it is a
    function of the seed and the epoch's number)."""
    flags = ["--max-batches", "4", "--batch-size", "32", "--seed", "3", *extra]
    whole, first, resumed = (str(tmp_path / name) for name in ("whole", "first", "resumed"))
    assert main(["train", *flags, "--epochs", "2", "--save-states", whole]) == 0
    assert main(["train", *flags, "--epochs", "1", "--save-states", first]) == 0
    capsys.readouterr()
    argv = ["train", *flags, "--epochs", "2", "--resume", first, "--save-states", resumed]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "resumed after epoch 1" in out and [line[:8] for line in epoch_lines(out)] == [
        "epoch 2:"
    ]
    expected, attrs = read_checkpoint(whole)
    got, _ = read_checkpoint(resumed)
    assert set(got) == set(expected)
    assert {EPOCHS_DONE, STEP_COUNTER} <= set(expected)
    assert any(name.startswith("optimizer.moments.") for name in expected)
    assert expected[EPOCHS_DONE][0] == 2 and expected[STEP_COUNTER][0] == 8
    for name, array in expected.items():
        np.testing.assert_array_equal(got[name], array, err_msg=name)
    after_one, _ = read_checkpoint(first)  # and training moved them: the test can fail
    assert any(
        not np.array_equal(after_one[n], a)
        for n, a in expected.items()
        if attrs[n]["state_type"] == 0
    )


def compiled_mlp(dev):
    model = create_model("mlp", num_classes=10)
    optimizer = opt.SGD(lr=0.1, momentum=0.9)
    model.set_optimizer(optimizer)
    tx = tensor.PlaceHolder((4, 1, 28, 28), dev)
    model.compile([tx], is_train=True, use_graph=False)
    return model, optimizer, tx


def test_resume_puts_back_the_dropout_counter_and_the_optimizer(tmp_path):
    dev = device.create_cpu_device("64MiB")
    model, optimizer, tx = compiled_mlp(dev)
    ty = tensor.PlaceHolder((4,), dev, tensor.int32)
    tx.copy_from_numpy(np.ones((4, 1, 28, 28), np.float32))
    ty.copy_from_numpy(np.arange(4, dtype=np.int32))
    model(tx, ty)
    dev.make_dropout_counter(tensor.Tensor).set_value(7)
    path = tmp_path / "at3.zip"
    Saver(str(path)).save(model, optimizer, dev, epochs_done=3)
    other_dev = device.create_cpu_device("64MiB")
    other, other_optimizer, _ = compiled_mlp(other_dev)
    assert resume(str(path), other, other_optimizer, other_dev) == 3
    assert tensor.to_numpy(other_dev.dropout_counter)[0] == 7
    saved, resumed = optimizer.get_states(), other_optimizer.get_states()
    assert resumed["step_counter"] == saved["step_counter"] == 1
    for name, array in saved["moments"].items():
        np.testing.assert_array_equal(resumed["moments"][name], array)
    for name, t in model.get_states().items():
        np.testing.assert_array_equal(tensor.to_numpy(other.get_states()[name]), tensor.to_numpy(t))
    assert DROPOUT_COUNTER in read_checkpoint(path)[0]


def model_only_checkpoint(path):
    """A checkpoint of the CNN's states alone, as Model.save_states writes it."""
    dev = device.create_cpu_device("64MiB")
    model = create_model("cnn", num_classes=10)
    model.compile([tensor.PlaceHolder((32, 1, 28, 28), dev)], is_train=True, use_graph=False)
    model.save_states(str(path))


@pytest.mark.parametrize(
    "make,says",
    [
        (lambda p: p.write_bytes(b"not a zip"), "CheckpointError: "),
        (model_only_checkpoint, "not where training stood"),
        ("mlp", "does not match this model"),
    ],
)
def test_a_bad_resume_file_is_one_line_and_trains_nothing(
    capsys, tmp_path, monkeypatch, make, says
):
    path = tmp_path / "states.zip"
    if make == "mlp":  # a checkpoint of another model
        assert main(["train", "--model", "mlp", *QUICK, "--save-states", str(path)]) == 0
        capsys.readouterr()
    else:
        make(path)
    monkeypatch.setattr(train_command, "train_epoch", lambda *a: pytest.fail("trained"))
    assert main(["train", *QUICK, "--epochs", "2", "--resume", str(path)]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: CheckpointError: ") and says in line, line
    assert str(path) in line


def test_resume_refuses_a_checkpoint_with_no_epoch_left_and_a_missing_file(
    capsys, tmp_path, monkeypatch
):
    path = str(tmp_path / "done.zip")
    assert main(["train", *QUICK, "--save-states", path]) == 0
    capsys.readouterr()
    monkeypatch.setattr(train_command, "train_epoch", lambda *a: pytest.fail("trained"))
    assert main(["train", *QUICK, "--resume", path]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: error: argument --resume:") and "--epochs 2" in line
    assert main(["train", "--resume", str(tmp_path / "missing.zip")]) == 2
    assert "is not a file" in one_line_error(capsys)


# -- --model offers only what some data set can feed ----------------------------------------


def model_choices(help_text):
    """The {a,b,...} choices that --help lists for --model."""
    return re.search(r"--model \{([^}]*)\}", help_text).group(1).split(",")


def test_train_offers_only_models_some_data_set_fits_and_plan_all(capsys):
    assert main(["train", "--help"]) == 0
    train_help = capsys.readouterr().out
    assert main(["plan", "--help"]) == 0
    plan_help = capsys.readouterr().out
    assert "alexnet" not in model_choices(train_help)
    assert set(model_choices(train_help)) == set(MODELS) - {"alexnet"}
    assert "alexnet" in plan_help  # nnmem plan plans it
    assert "alexnet needs larger images" in " ".join(train_help.split())


def test_alexnet_is_refused_naming_nnmem_plan(capsys):
    assert main(["train", "--model", "alexnet"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: error: argument --model: alexnet needs images of at ")
    assert "nnmem plan --model alexnet" in line


# -- what --concurrency auto chose -----------------------------------------------------------


def test_concurrency_auto_says_what_it_chose(capsys):
    # 44 batches of 32: more than profiling takes on 16 cores (9 counts, 2 steps each)
    argv = ["train", "--epochs", "1", "--batch-size", "32", "--concurrency", "auto"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("concurrency auto:")]
    found = re.fullmatch(
        r"concurrency auto: profiled in (\d+) steps \((\d+\.\d\d) s\); of the step's (\d+) "
        r"operations, (.*) \(of (\d+) cores\)(; independent operations co-run.*)?",
        line,
    )
    assert found, line
    shares = re.findall(r"(\d+) on (\d+) threads?", found.group(4))
    assert sum(int(n) for n, _ in shares) == int(found.group(3)) > 0
    assert all(1 <= int(t) <= int(found.group(5)) for _, t in shares)
    assert out.index(line) < out.index("epoch 1:")


def test_concurrency_that_never_finishes_profiling_says_so(capsys):
    assert main(["train", "--epochs", "1", "--max-batches", "2", "--concurrency", "auto"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^concurrency auto: still profiling after \d+ steps", out, re.M), out


def test_the_concurrency_line_counts_every_call_of_the_step():
    profile = {
        "policy": "1-2",
        "strategies": [1, 2],
        "cores": 8,
        "strategy_4_active": False,
        "profiling_steps": 6,
        "profiling_seconds": 0.5,
        "operations": {
            "a 3x3": {"best": 4, "type_count": 2, "instances": 3},
            "a 5x5": {"best": 2, "type_count": 2, "instances": 1},
            "b 3": {"best": 1, "type_count": 1, "instances": 5},
        },
    }
    assert concurrency_line(profile) == (
        "concurrency 1-2: profiled in 6 steps (0.50 s); of the step's 9 operations, 5 on 1 "
        "thread, 4 on 2 threads (of 8 cores)"
    )
