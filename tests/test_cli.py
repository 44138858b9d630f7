"""nnmem train and nnmem plan: they run, report, and answer bad input on one line, never with
a traceback."""

import importlib.util
import json
import re

import numpy as np
import pytest

from nnmem import device, planning, tensor
from nnmem.cli import flags, main
from nnmem.cli import plan as plan_command
from nnmem.cli import train as train_command
from nnmem.cli.divergence import StateCopy, first_nonfinite_layer
from nnmem.cli.train_report import COMPILING
from nnmem.communicator import DistributedError
from nnmem.data import load
from nnmem.layer import Layer
from nnmem.models import create_model
from nnmem.search import largest_fitting

original_layer_call = Layer.__call__


def test_train_reports_each_epoch(capsys):
    assert main(["train", "--epochs", "2", "--max-batches", "3", "--batch-size", "32"]) == 0
    out, err = capsys.readouterr()
    # the progress bar shows on a terminal only, the line on compiling with a cold cache only
    assert err.replace(COMPILING + "\n", "") == ""
    lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 2
    for line in lines:
        assert re.search(
            r"loss \d+\.\d+  test accuracy 0\.\d+  \d+ images/s  peak pool memory "
            r"\d+\.\d MiB",
            line,
        ), line


def test_train_with_concurrency_control(capsys):
    args = ["train", "--epochs", "1", "--max-batches", "6", "--concurrency", "auto"]
    assert main(args) == 0
    out, _ = capsys.readouterr()
    assert "epoch 1" in out


@pytest.mark.parametrize(
    "extra,says",
    [
        (["--concurrency", "fast"], "invalid choice"),
        (["--concurrency", "auto", "--no-graph"], "leave out --no-graph"),
        (["--concurrency", "1-2", "--offload", "all"], "leave out --offload"),
    ],
)
def test_concurrency_flags_that_cannot_work_are_one_line(capsys, extra, says):
    assert main(["train", *extra]) == 2
    line = one_line_error(capsys)
    assert "--concurrency" in line and says in line


def test_train_mlp_eagerly(capsys):
    assert (
        main(["train", "--model", "mlp", "--epochs", "1", "--max-batches", "2", "--no-graph"]) == 0
    )
    assert "mlp on digits" in capsys.readouterr().out


def test_timeline_plot(capsys, tmp_path):
    png = tmp_path / "timeline.png"
    assert (
        main(
            [
                "train",
                "--model",
                "mlp",
                "--epochs",
                "1",
                "--max-batches",
                "1",
                "--timeline",
                str(png),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for label in ("no recycling", "eager", "graph (BFS)", "lower bound of graph (BFS): "):
        assert label in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "timeline.json").read_text())
    labels = [t["label"] for t in data["timelines"]]
    assert labels == ["no recycling", "eager", "graph (BFS)", "graph + recompute (cost-aware)"]
    graph = data["timelines"][2]
    assert len(graph["bytes"]) == len(graph["names"]) == len(graph["live"])
    assert max(graph["bytes"]) >= data["lower_bound_bytes"] > 0


def test_bad_input_is_explained(capsys):
    assert main(["train", "--data", "imagenet"]) == 2
    assert "digits" in capsys.readouterr().err
    assert main(["train", "--pool", "lots"]) == 2
    assert "512MiB" in capsys.readouterr().err
    assert main(["train", "--pool", "1MiB", "--max-batches", "1", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "OutOfMemory" in err and "parameter" in err


# -- bad flags: one line naming the flag and what it takes, never a traceback ---------------


def one_line_error(capsys):
    """The single line a failed command wrote to stderr (asserting there is exactly one)."""
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.mark.parametrize(
    "flag,value,says",
    [
        ("--batch-size", "0", "at least 1"),
        ("--batch", "-3", "at least 1"),
        ("--epochs", "-1", "at least 1"),
        ("--epochs", "0", "at least 1"),
        ("--max-batches", "0", "at least 1"),
        ("--max-batches", "-1", "at least 1"),
        ("--lr", "nan", "finite"),
        ("--lr", "inf", "finite"),
        ("--lr", "-0.1", "above 0"),
        ("--lr", "fast", "a number"),
        ("--momentum", "1.5", "below 1"),
        ("--momentum", "-0.1", "at least 0"),
        ("--weight-decay", "-1e-4", "0 or more"),
        ("--weight-decay", "nan", "finite"),
        ("--pool", "lots", "512MiB"),
        ("--pool", "0", "at least 1 byte"),
        ("--seed", "-1", "0 or more"),
        ("--depth", "0", "at least 1"),
        ("--depth", "99999998", "at most 20000"),
        ("--pool", "100B", "at least 256 bytes"),
        ("--link-gbps", "1e-300", "at least 0.01 GB/s"),  # a copy's sleep overflowed the clock
        ("--save-states", "", "give a file name"),
    ],
)
def test_train_refuses_a_bad_flag_on_one_line(capsys, flag, value, says):
    assert main(["train", f"{flag}={value}"]) == 2  # "=": argparse reads -1e-4 as a flag
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: error: argument ") and flag in line and says in line


@pytest.mark.parametrize(
    "extra,says",
    [
        (["--dist-option", "plain"], "launch it with mpiexec"),
        (["--dist-timeout", "10"], "launch it with mpiexec"),
        (["--dist-option", "gzip"], "invalid choice"),
        (["--dist-timeout", "0"], "above 0"),
        (["--spars", "-1"], "above 0"),
    ],
)
def test_distributed_flags_without_mpiexec_are_one_line(capsys, extra, says):
    assert main(["train", *extra]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: error: argument ") and says in line


@pytest.mark.parametrize(
    "flag,value,says",
    [
        ("--width", "0", "above 0"),
        ("--width", "-1", "above 0"),
        ("--width", "nan", "finite"),
        ("--batch", "0", "at least 1"),
        ("--batch-size", "0", "at least 1"),
        ("--depth", "-5", "at least 1"),
        ("--depth", "99999998", "at most 20000"),  # planned on without a word for minutes
        ("--num-classes", "0", "at least 1"),
        ("--input", "3x0x32", "3x224x224"),
        ("--budget", "0", "at least 1 byte"),
    ],
)
def test_plan_refuses_a_bad_flag_on_one_line(capsys, flag, value, says):
    assert main(["plan", f"{flag}={value}"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem plan: error: argument ") and flag in line and says in line


@pytest.mark.parametrize("command", ["plan", "train"])
def test_a_depth_no_resnet_has_names_the_flag_and_the_valid_depths(capsys, command):
    assert main([command, "--model", "resnet", "--depth", "21"]) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"nnmem {command}: error: argument --depth: ") and "6n + 2" in line


@pytest.mark.parametrize(
    "model,sample", [("resnet", "3x32"), ("cnn", "1x8x8"), ("densenet", "1x2x2")]
)
def test_an_input_the_model_cannot_take_names_the_flag(capsys, model, sample):
    assert main(["plan", "--model", model, "--input", sample]) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"nnmem plan: error: argument --input: {model} cannot take samples")


@pytest.mark.parametrize(
    "argv,says",
    [
        (["plan", "--model", "cnn", "--depth", "7"], "argument --depth: it sets a ResNet's"),
        (["plan", "--model", "cnn", "--stem", "imagenet"], "argument --stem: it shapes a ResNet"),
        (["plan", "--model", "mlp", "--block", "basic"], "argument --block: it shapes a ResNet"),
        (["train", "--model", "cnn", "--depth", "7"], "argument --depth: it sets a ResNet's"),
        (["plan", "--budget", "1GiB", "--find-batch", "--batch", "3"], "--find-batch searches"),
        (
            ["plan", "--model", "resnet", "--budget", "1GiB", "--find-depth", "--depth", "56"],
            "--find-depth searches",
        ),
    ],
)
def test_a_flag_the_command_would_ignore_is_refused(capsys, argv, says):
    assert main(argv) == 2
    assert says in one_line_error(capsys)


@pytest.mark.parametrize("model", ["cnn", "resnet"])
def test_plan_without_depth_or_batch_plans_the_default(capsys, model):
    """No --depth for a model without one, and none given for a ResNet (20)."""
    assert main(["plan", "--model", model]) == 0
    out = capsys.readouterr().out
    assert "input 64x1x28x28:" in out and "all three" in out, out


def test_a_pool_this_machine_cannot_allocate_names_the_flag(capsys):
    assert main(["train", "--pool", "100PiB", "--epochs", "1", "--max-batches", "1"]) == 2
    line = one_line_error(capsys)
    assert "argument --pool: cannot allocate 100.0 PiB on this machine" in line


@pytest.mark.parametrize("where", ["missing-folder", "a-folder"])
def test_save_states_is_checked_before_any_work(capsys, tmp_path, monkeypatch, where):
    """It is written after the first epoch: a bad path used to end a finished epoch."""
    monkeypatch.setattr(train_command, "load", lambda name: pytest.fail("loaded the data first"))
    path = tmp_path / "missing" / "cnn.zip" if where == "missing-folder" else tmp_path
    assert main(["train", "--save-states", str(path)]) == 2
    line = one_line_error(capsys)
    says = "does not exist" if where == "missing-folder" else "is a folder; name a file in it"
    assert "argument --save-states" in line and says in line


@pytest.mark.parametrize("folder", ["t.png", "t.json"])
def test_a_timeline_file_that_is_a_folder_is_refused_before_any_work(capsys, tmp_path, folder):
    """A plot writes t.png and t.json beside it: either a folder left the other half-done."""
    (tmp_path / folder).mkdir()
    assert main(["plan", "--timeline", str(tmp_path / "t.png")]) == 2
    line = one_line_error(capsys)
    assert "argument --timeline" in line and f"{folder}' is a folder" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder]


def test_a_distributed_error_is_one_line(capsys, monkeypatch):
    """Under mpiexec, another rank's failure reaches this one as a DistributedError."""

    def fail(args):
        raise DistributedError("rank 1: call #14 (plain all-reduce) did not complete within 10 s")

    monkeypatch.setattr(train_command, "run", fail)
    assert main(["train"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: DistributedError: rank 1: call #14")


def test_cuda_without_a_gpu_is_a_one_line_error(capsys):
    assert main(["train", "--device", "cuda", "--epochs", "1", "--max-batches", "1"]) == 2
    line = one_line_error(capsys)
    assert "--device" in line and "use --device cpu" in line


def test_a_batch_larger_than_the_data_set_names_the_largest(capsys):
    assert main(["train", "--batch-size", "5000"]) == 2
    line = one_line_error(capsys)
    assert "--batch-size" in line and "at most 1437" in line


# -- a diverging run stops at the step, naming the first layer that went non-finite ----------


def test_a_diverging_run_names_the_step_and_the_layer(capsys):
    assert main(["train", "--lr", "1e6", "--epochs", "1", "--max-batches", "10"]) == 2
    line = one_line_error(capsys)
    match = re.search(
        r"the loss is (nan|inf) at epoch 1, batch (\d+), and the first layer whose "
        r"output is not finite is (\w+)",
        line,
    )
    assert match, line
    assert int(match.group(2)) > 1  # the first step, from finite parameters, is finite
    assert match.group(3) in {
        "conv1",
        "conv2",
        "pooling1",
        "pooling2",
        "linear1",
        "linear2",
        "relu",
        "flatten",
    }
    assert "lower --lr" in line


def test_nan_in_the_data_is_blamed_on_the_data(capsys, monkeypatch):
    def load_with_a_nan(name):
        x_train, y_train, x_test, y_test = load(name)
        x_train = x_train.copy()
        x_train[:, 0, 14, 14] = np.nan  # every image: the first batch holds one
        return x_train, y_train, x_test, y_test

    monkeypatch.setattr(train_command, "load", load_with_a_nan)
    assert main(["train", "--epochs", "1", "--max-batches", "2"]) == 2
    line = one_line_error(capsys)
    assert "epoch 1, batch 1" in line and "the input batch itself holds NaN" in line


def test_the_states_copy_puts_a_model_back():
    dev = device.create_cpu_device("64MiB")
    model = create_model("mlp")
    model.compile([tensor.PlaceHolder((4, 1, 28, 28), dev)], is_train=True)
    copy = StateCopy(model)
    before = {k: tensor.to_numpy(t) for k, t in model.get_states().items()}
    for t in model.get_states().values():
        t.set_value(np.nan)
    copy.restore()
    for k, t in model.get_states().items():
        np.testing.assert_array_equal(tensor.to_numpy(t), before[k])


def test_first_nonfinite_layer_finds_the_innermost_culprit_and_unwraps():
    dev = device.create_cpu_device("64MiB")
    model = create_model("mlp")
    x = tensor.PlaceHolder((4, 1, 28, 28), dev)
    model.compile([x], is_train=True)
    x.copy_from_numpy(np.ones(x.shape, np.float32))
    assert first_nonfinite_layer(model, x) is None
    model.get_params()["Linear_1.W"].set_value(np.inf)
    assert first_nonfinite_layer(model, x) == "Linear_1"
    assert Layer.__call__ is original_layer_call


# -- out of memory: the report, its notes, and the --pool that fits -------------------------


def test_out_of_memory_names_the_pool_that_fits_and_it_does(capsys):
    argv = ["train", "--model", "mlp", "--epochs", "2", "--max-batches", "2"]
    assert main(argv + ["--pool", "256KiB"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "OutOfMemory" in err
    match = re.search(
        r"mlp at batch 64 fits in a pool of .* \((\d+) bytes\): rerun with "
        r"--pool (\d+)MiB",
        err,
    )
    assert match, err
    needed, suggested = int(match.group(1)), int(match.group(2))
    assert main(argv + ["--pool", str(needed)]) == 0  # exactly enough, evaluation included
    assert main(argv + ["--pool", f"{suggested}MiB"]) == 0
    capsys.readouterr()
    assert main(argv + ["--pool", str(needed - 256)]) == 2  # and not a block more than that
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"({needed} bytes): rerun with --pool" in err
    assert "nnmem plan --model mlp --batch 64 --input 1x28x28" in err  # the step, filled in


def test_out_of_memory_under_a_budget_with_offloading_names_the_budget_that_fits(capsys):
    """With --offload all the hint is that policy's budget (it said "without offloading"
    and to add --offload all, which was there)."""
    argv = ["train", "--offload", "all", "--epochs", "1", "--max-batches", "2"]
    argv += ["--pool", "64MiB"]  # a device of its own: the default one may hold earlier tests'
    assert main(argv + ["--budget", "10MiB"]) == 2
    err = capsys.readouterr().err
    match = re.search(r"with --offload all, cnn at batch 64 needs .* \((\d+) bytes\)", err)
    assert match and "without offloading" not in err, err
    needed = int(match.group(1))
    assert 10 * 2**20 < needed < 12 * 2**20  # less than the 13.0 MiB without offloading
    assert main(argv + ["--budget", str(needed)]) == 0


# -- one vocabulary for both commands, and plan's defaults are what train runs ---------------


def test_both_commands_take_batch_and_batch_size(capsys):
    for flag in ("--batch", "--batch-size"):
        assert (
            main(["train", "--model", "mlp", "--epochs", "1", "--max-batches", "1", flag, "16"])
            == 0
        )
        assert "batch 16" in capsys.readouterr().out
        assert main(["plan", "--model", "mlp", flag, "16"]) == 0
        assert "input 16x1x28x28" in capsys.readouterr().out


def test_plan_defaults_to_what_train_runs(capsys):
    x_train = load(flags.DEFAULT_DATA)[0]
    assert plan_command.TRAIN_SAMPLE == x_train.shape[1:]
    assert main(["plan", "--model", "cnn"]) == 0
    assert "CNN, input 64x1x28x28:" in capsys.readouterr().out


def test_help_names_the_commands_that_exist(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "nnmem train" in out and "nnmem plan" in out and "later" not in out
    assert "bench" not in out


# -- the searches end, however large the budget ----------------------------------------------


def test_find_depth_stops_at_its_limit(capsys, monkeypatch):
    monkeypatch.setattr(plan_command, "MAX_SEARCH_DEPTH", 56)  # 4000 plans for minutes
    assert main(["plan", "--model", "resnet", "--find-depth", "--budget", "1000TiB"]) == 0
    out = capsys.readouterr().out
    assert "deepest ResNet that fits 1000.0 TiB: at least 56 (the search stops at 56)" in out
    assert "ResNet, input 64x1x28x28" in out


def test_find_batch_stops_at_its_limit(capsys):
    assert main(["plan", "--model", "mlp", "--find-batch", "--budget", "1000TiB"]) == 0
    out = capsys.readouterr().out
    limit = plan_command.MAX_SEARCH_BATCH
    assert (
        f"largest batch that fits 1000.0 TiB: at least {limit} (the search stops at {limit})" in out
    )


@pytest.mark.parametrize("fitting", range(0, 21))
def test_largest_fitting_finds_the_end_of_the_prefix_in_few_probes(fitting):
    candidates = list(range(100, 120))
    probed = []

    def fits(c):
        probed.append(c)
        return c < 100 + fitting

    expected = None if fitting == 0 else candidates[fitting - 1]
    assert largest_fitting(fits, candidates) == expected
    assert len(probed) <= 2 * 5 + 1  # gallop then bisect: O(log n), here n = 20


def test_evaluation_pads_the_last_batch_and_counts_only_real_samples():
    dev = device.create_cpu_device("64MiB")
    dev.SetRandSeed(0)
    model = create_model("mlp")
    tx = tensor.PlaceHolder((64, 1, 28, 28), dev)
    model.compile([tx], is_train=True, use_graph=True)
    x, y = load("digits")[2:]  # 360 test images: five batches of 64 and one of 40
    model.eval()
    logits = tensor.to_numpy(model(tensor.from_numpy(x, dev)))
    expected = float(np.mean(logits.argmax(axis=1) == y))
    assert train_command.evaluate(model, tx, x, y) == expected


# -- --timeline: matplotlib checked first (for a .png), a .png or .html path only ---------------


def test_timeline_without_matplotlib_is_refused_before_any_work(capsys, monkeypatch):
    find_spec = importlib.util.find_spec

    def without_matplotlib(name, *args, **kwargs):
        return None if name == "matplotlib" else find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_matplotlib)
    monkeypatch.setattr(train_command, "load", lambda name: pytest.fail("loaded the data first"))
    argv = ["train", "--model", "mlp", "--epochs", "1", "--max-batches", "1"]
    assert main(argv + ["--timeline", "timeline.png"]) == 2
    line = one_line_error(capsys)
    assert "--timeline" in line and "matplotlib" in line
    assert "pip install matplotlib" in line and "'.[plot]'" in line
    assert "html" in line  # the memory viewer needs no matplotlib


@pytest.mark.parametrize("name", ["timeline", "timeline.json", "timeline.pdf", "timeline."])
def test_timeline_takes_a_png_or_html_path_only(capsys, tmp_path, name):
    path = tmp_path / name
    argv = ["train", "--model", "mlp", "--epochs", "1", "--max-batches", "1"]
    assert main(argv + ["--timeline", str(path)]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: error: argument --timeline: ") and ".png" in line
    assert str(tmp_path / "timeline.png") in line  # the names to use instead
    assert str(tmp_path / "timeline.html") in line
    assert list(tmp_path.iterdir()) == []  # refused before anything ran or was written


def test_timeline_in_a_missing_folder_is_refused_before_any_work(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(train_command, "load", lambda name: pytest.fail("loaded the data first"))
    assert main(["train", "--timeline", str(tmp_path / "missing" / "t.png")]) == 2
    line = one_line_error(capsys)
    assert "--timeline" in line and "does not exist" in line


def test_timeline_names_the_files_it_wrote(capsys, tmp_path):
    png = tmp_path / "t.PNG"  # any case: matplotlib reads the extension case-blind
    argv = ["train", "--model", "mlp", "--epochs", "1", "--max-batches", "1"]
    assert main(argv + ["--timeline", str(png)]) == 0
    out = capsys.readouterr().out
    assert f"timeline written to {png} (data: {tmp_path / 't.json'})" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.PNG", "t.json"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- models that need larger images than the data set's ---------------------------------------


def test_alexnet_on_the_digits_is_refused_saying_no_data_set_fits(capsys, monkeypatch):
    monkeypatch.setattr(train_command, "create_device", lambda args: pytest.fail("built a device"))
    assert main(["train", "--model", "alexnet"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: error: argument --model: alexnet needs images of at ")
    assert "67x67" in line and "3x227x227" in line and "1x28x28" in line
    assert "none of the data sets" in line and "cifar10:DIR 3x32x32" in line


def test_vgg16_on_the_digits_is_refused_naming_cifar10(capsys, monkeypatch):
    monkeypatch.setattr(train_command, "create_device", lambda args: pytest.fail("built a device"))
    assert main(["train", "--model", "vgg16"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem train: error: argument --model: vgg16 needs images of at ")
    assert "32x32" in line and "3x224x224" in line and "--data cifar10:DIR" in line


def test_plan_refuses_an_input_too_small_for_the_model(capsys):
    assert main(["plan", "--model", "vgg16", "--input", "3x28x28"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem plan: error: argument --input: vgg16") and "3x224x224" in line


@pytest.mark.parametrize("name", ["alexnet", "vgg16"])
def test_the_smallest_images_are_the_models_own(name):
    size = flags.SMALLEST_IMAGE[name]  # pooling shrinks anything smaller to nothing
    assert planning.plan(create_model(name, width=0.05), (2, 3, size, size)).nodes > 0
    with pytest.raises(ValueError, match="does not fit"):
        planning.plan(create_model(name, width=0.05), (2, 3, size - 1, size - 1))


# -- Ctrl-C: one line, exit status 130 --------------------------------------------------------


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def run_until_interrupted(argv):
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main() with a traceback")


def test_ctrl_c_during_train_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(train_command, "train_epoch", interrupt)
    assert run_until_interrupted(["train", "--model", "mlp", "--epochs", "1"]) == 130
    assert one_line_error(capsys) == "nnmem train: interrupted"


def test_ctrl_c_during_plan_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(plan_command, "plan", interrupt)
    assert run_until_interrupted(["plan", "--model", "mlp"]) == 130
    assert one_line_error(capsys) == "nnmem plan: interrupted"


# -- a step larger than the planning device: one line, not the pool's report ------------------


@pytest.mark.parametrize(
    "flags",
    [
        ["--model", "cnn", "--input", "1x99999999x99999999"],
        ["--model", "mlp", "--input", "99999999999999999999"],
        ["--model", "resnet", "--width", "1e300"],
        ["--model", "alexnet", "--width", "1e308"],  # channels overflow to infinity
        ["--model", "cnn", "--num-classes", "99999999999999"],
    ],
)
def test_a_step_too_large_to_plan_is_one_line(capsys, flags):
    assert main(["plan"] + flags) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem plan: error: a training step of ")
    assert "the input, --width or --num-classes is too large" in line
    assert "create_cpu_device" not in line


def test_a_step_larger_than_the_planning_device_names_its_size(capsys):
    assert main(["plan", "--model", "cnn", "--input", "1x99999999x99999999"]) == 2
    assert "needs more than the planning device's 1.0 PiB" in one_line_error(capsys)


def test_find_batch_passes_over_steps_too_large_to_plan(capsys):
    # batches of 2**20 such images need far more than the planning device's 1 PiB
    argv = ["plan", "--model", "cnn", "--input", "1x8000x8000", "--find-batch"]
    assert main(argv + ["--budget", "1000TiB"]) == 0
    out = capsys.readouterr().out
    batch = int(re.search(r"largest batch that fits 1000\.0 TiB: (\d+)\n", out).group(1))
    assert 1 < batch < plan_command.MAX_SEARCH_BATCH
    assert f"CNN, input {batch}x1x8000x8000" in out


def test_small_widths_still_plan(capsys):
    assert main(["plan", "--model", "resnet", "--width", "1e-9"]) == 0
    assert "ResNet, input 64x1x28x28" in capsys.readouterr().out
