"""ONNX files on the command line: nnmem plan MODEL.onnx prints the peaks nnmem.planning.plan
finds for the imported graph, on the graph's own input or the sizes the flags give; nnmem train
--onnx trains the weights the file holds on the shipped digits; everything a user can get
wrong (a zoo model's flag, a symbolic size left open, an operator the importer lacks, a broken
file, data the model cannot take) is one line and exit status 2."""

import math
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nnmem import device, planning, sonnx, tensor
from nnmem.cli import main
from nnmem.cli.plan_table import size_format
from nnmem.models import create_model
from nnmem.sonnx import architectures

LIGHT_RESNET50 = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
QUICK = ["--epochs", "1", "--max-batches", "2", "--batch-size", "16"]


def exported(path, name="cnn", shape=(2, 1, 28, 28), **kwargs):
    """A zoo model, compiled at `shape` and exported with its (initial) weights to `path`."""
    model = create_model(name, **kwargs)
    x = tensor.from_numpy(np.zeros(shape, np.float32), device.get_default_device())
    model.compile([x], is_train=False)
    sonnx.export(model, x, str(path))
    return str(path)


@pytest.fixture(scope="module")
def cnn_file(tmp_path_factory):
    return exported(tmp_path_factory.mktemp("onnx") / "cnn.onnx", num_classes=10, num_channels=1)


def tiny_bert(**kwargs):
    """BERT with one layer of width 16 and sequences of 8 tokens (symbolic batch)."""
    return architectures.bert(
        layers=1, hidden=16, heads=2, intermediate=32, vocab=50, sequence=8, positions=16, **kwargs
    )


def one_line_error(capsys):
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def rows(out):
    """{technique: its cells} of the plan table in `out`."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("technique"))
    table = {}
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        cells = re.split(r" {2,}", line.strip())
        table[cells[0]] = cells
    return table


def assert_table_is_the_plan(out, step):
    """The printed rows hold `step`'s peaks and lower bounds, written as the table writes them."""
    size = size_format([t.peak_bytes for t in step.techniques])
    table = rows(out)
    assert len(table) == len(step.techniques)
    for t in step.techniques:
        name = t.technique if t.offload == "none" else f"{t.technique} ({t.offload})"
        assert table[name][1:3] == [size(t.peak_bytes), size(t.lower_bound_bytes)], name


def graph_of(path):
    return sonnx.SONNXModel(sonnx.load(path, load_external_data=False))


# -- nnmem plan MODEL.onnx: the plan of the imported graph ------------------------------------


def test_plan_of_an_onnx_file_is_planning_plan_of_its_graph(cnn_file, capsys):
    assert main(["plan", cnn_file, "--batch", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cnn.onnx, input 8x1x28x28:")
    step = planning.plan(graph_of(cnn_file), (8, 1, 28, 28))
    assert_table_is_the_plan(out, step)
    assert main(["plan", "--onnx", cnn_file, "--batch", "8"]) == 0  # the same, by flag
    assert capsys.readouterr().out == out


def test_plan_of_an_onnx_file_takes_the_budget_and_the_policies(cnn_file, capsys):
    argv = ["plan", cnn_file, "--batch", "8", "--budget", "5MiB", "--offload", "conv"]
    assert main([*argv, "--recompute", "speed"]) == 0
    out = capsys.readouterr().out
    step = planning.plan(
        graph_of(cnn_file), (8, 1, 28, 28), recompute="speed", offload="conv", budget=5 * 2**20
    )
    assert_table_is_the_plan(out, step)
    table = rows(out)
    for t in step.techniques:
        name = t.technique if t.offload == "none" else f"{t.technique} ({t.offload})"
        assert ("does not fit" not in table[name]) == t.fits(5 * 2**20)


def test_light_resnet50_plans_at_its_own_input_and_refuses_a_too_small_one(capsys):
    assert main(["plan", str(LIGHT_RESNET50), "--batch", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("light_resnet50.onnx, input 2x3x224x224:")
    table = rows(out)
    peaks = {name: cells[1] for name, cells in table.items()}
    assert set(peaks) == {
        "baseline",
        "liveness",
        "liveness + recompute",
        "liveness + offload (all)",
        "all three (all)",
    }
    # its final 7x7 average pool needs 224x224 images: a smaller one is the pool's own words
    assert main(["plan", str(LIGHT_RESNET50), "--batch", "2", "--image-size", "64"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem plan: error: argument --image-size: light_resnet50.onnx")
    assert "7x7 window" in line and "3x224x224" in line


def test_a_token_model_plans_with_its_sequence_and_a_symbolic_one_needs_the_flag(tmp_path, capsys):
    path = str(tmp_path / "bert.onnx")
    architectures.save_without_weights(tiny_bert(), path)
    assert main(["plan", path, "--sequence", "8", "--batch", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("bert.onnx, input 4x8:")
    assert_table_is_the_plan(out, planning.plan(graph_of(path), (4, 8)))
    assert main(["plan", path]) == 0  # the symbolic batch: 1, the graph's sequence: 8
    assert capsys.readouterr().out.startswith("bert.onnx, input 1x8:")

    model = onnx.load(path, load_external_data=False)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "sequence"
    symbolic = str(tmp_path / "symbolic.onnx")
    architectures.save_without_weights(model, symbolic)
    assert main(["plan", symbolic, "--batch", "4"]) == 2
    line = one_line_error(capsys)
    assert "symbolic dimension 'sequence'" in line and "--sequence" in line
    assert main(["plan", symbolic, "--sequence", "8", "--batch", "4"]) == 0
    assert capsys.readouterr().out.startswith("symbolic.onnx, input 4x8:")


def averaging_file(path, dims, axes, features):
    """A classifier of an input of `dims` (sizes or names): the mean over `axes` leaves
    (batch, features), then a MatMul by a (features, 2) weight gives two logits."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weight = numpy_helper.from_array(np.ones((features, 2), np.float32), "w")
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=axes, keepdims=0),
        helper.make_node("MatMul", ["mean", "w"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "mean", [x], [y], initializer=[weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_symbolic_size_names_itself_and_the_flag_that_fixes_it(tmp_path, capsys):
    image = averaging_file(str(tmp_path / "image.onnx"), ["n", 3, "height", "width"], [2, 3], 3)
    assert main(["plan", image]) == 2
    line = one_line_error(capsys)
    assert "symbolic dimension 'height' (axis 2)" in line and "--image-size" in line
    assert main(["plan", image, "--image-size", "8", "--batch", "2"]) == 0
    assert capsys.readouterr().out.startswith("image.onnx, input 2x3x8x8:")
    steps = averaging_file(str(tmp_path / "steps.onnx"), ["n", "steps", 4], [1], 4)
    assert main(["plan", steps]) == 2
    line = one_line_error(capsys)
    assert "symbolic dimension 'steps' (axis 1)" in line and "--input Nx4" in line
    assert main(["plan", steps, "--input", "6x4"]) == 0
    assert capsys.readouterr().out.startswith("steps.onnx, input 1x6x4:")


# -- nnmem plan: what an ONNX file refuses, on one line ------------------------------------------


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--depth", "20"], "argument --depth: it applies to the zoo's models"),
        (["--model", "cnn"], "argument --model: it applies to the zoo's models"),
        (["--width", "2"], "argument --width: it applies to the zoo's models"),
        (["--dtype", "float16"], "argument --dtype: it applies to the zoo's models"),
        (["--sequence", "8"], "argument --sequence: it sets the length of token ids"),
        (["--input", "1x28"], "has 3 dimension(s) after the batch, --input gives 2"),
    ],
)
def test_flags_that_do_not_apply_to_an_onnx_file_are_one_line(cnn_file, capsys, flags, words):
    assert main(["plan", cnn_file, *flags]) == 2
    assert words in one_line_error(capsys)


def test_onnx_flags_without_a_file_and_a_file_that_is_not_onnx_are_one_line(capsys):
    assert main(["plan", "--image-size", "32"]) == 2
    assert "argument --image-size: it sizes an ONNX model's input" in one_line_error(capsys)
    assert main(["plan", "resnet"]) == 2
    assert "is not an .onnx file" in one_line_error(capsys)


def test_an_unsupported_operator_is_the_importers_line(tmp_path, capsys):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    graph = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"])], "g", [x], [y])
    path = str(tmp_path / "hardmax.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(sonnx.Unsupported) as raised:
        sonnx.Graph(onnx.load(path))
    assert main(["plan", path]) == 2
    assert one_line_error(capsys) == f"nnmem plan: Unsupported: {raised.value}"


def test_a_truncated_or_missing_file_is_one_line(cnn_file, tmp_path, capsys):
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(open(cnn_file, "rb").read()[:3000])
    assert main(["plan", str(truncated)]) == 2
    line = one_line_error(capsys)
    assert line.startswith("nnmem plan: OnnxFileError:") and "truncated or corrupt" in line
    assert main(["plan", str(tmp_path / "missing.onnx")]) == 2
    assert "no such file" in one_line_error(capsys)


# -- nnmem train --onnx: the file's weights, on the shipped digits --------------------------------


def with_weights(path, out, value):
    """The model in `path` with every weight set to `value`, written to `out`."""
    model = onnx.load(path)
    for t in model.graph.initializer:
        array = np.full_like(numpy_helper.to_array(t), value)
        t.CopyFrom(numpy_helper.from_array(array, t.name))
    onnx.save(model, out)
    return str(out)


def test_train_onnx_trains_from_the_files_weights(cnn_file, tmp_path, capsys):
    assert main(["train", "--onnx", cnn_file, *QUICK]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cnn.onnx on digits: 1437 training / 360 test images (1, 28, 28)")
    assert len([line for line in out.splitlines() if line.startswith("epoch 1:")]) == 1
    # all weights zero: the logits are all equal, so the first batch's loss is ln 10 exactly
    # (a fresh random initialisation would not give it)
    zeros = with_weights(cnn_file, tmp_path / "zeros.onnx", 0.0)
    assert main(["train", "--onnx", zeros, "--epochs", "1", "--max-batches", "1"]) == 0
    loss = float(re.search(r"epoch 1: loss (\S+)", capsys.readouterr().out).group(1))
    assert loss == pytest.approx(math.log(10), abs=1e-4)


def test_train_onnx_resizes_the_digits_to_the_size_its_graph_fixes(tmp_path, capsys):
    path = exported(tmp_path / "cnn32.onnx", shape=(2, 1, 32, 32), num_classes=10, num_channels=1)
    assert main(["train", "--onnx", path, *QUICK]) == 0
    out = capsys.readouterr().out
    assert "digits: images resized from 28x28 to 32x32" in out
    assert "test images (1, 32, 32)" in out


def test_train_onnx_resumes_from_its_checkpoint(cnn_file, tmp_path, capsys):
    states = str(tmp_path / "states.zip")
    assert main(["train", "--onnx", cnn_file, *QUICK, "--save-states", states]) == 0
    argv = ["train", "--onnx", cnn_file, *QUICK[2:], "--epochs", "2", "--resume", states]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "resumed after epoch 1" in out and "epoch 2:" in out


def test_train_onnx_refuses_what_the_digits_cannot_feed_on_one_line(cnn_file, tmp_path, capsys):
    bert = str(tmp_path / "bert.onnx")
    architectures.save_without_weights(tiny_bert(), bert)
    assert main(["train", "--onnx", bert]) == 2
    assert "bert.onnx holds no weights to train from" in one_line_error(capsys)
    onnx.save(tiny_bert(weights="random"), bert)
    assert main(["train", "--onnx", bert]) == 2
    line = one_line_error(capsys)
    assert "takes token ids (batch, 8)" in line and "images (digits: 1x28x28)" in line
    rgb = exported(tmp_path / "rgb.onnx", shape=(2, 3, 28, 28), num_classes=10, num_channels=3)
    assert main(["train", "--onnx", rgb]) == 2
    assert "takes 3-channel images (batch, 3, 28, 28)" in one_line_error(capsys)
    five = exported(tmp_path / "five.onnx", "mlp", num_classes=5, num_channels=1)
    assert main(["train", "--onnx", five]) == 2
    assert "five.onnx has 5 outputs, and digits has 10 classes" in one_line_error(capsys)
    assert main(["train", "--onnx", cnn_file, "--depth", "20"]) == 2
    assert "argument --depth: it applies to the zoo's models" in one_line_error(capsys)
    assert main(["train", "--onnx", cnn_file, "--model", "mlp"]) == 2
    assert "not allowed with argument" in one_line_error(capsys)


def test_help_documents_the_onnx_arguments(capsys):
    assert main(["plan", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for words in ("MODEL.onnx an ONNX model to plan", "--image-size N", "--sequence N"):
        assert words in out
    assert main(["train", "--help"]) == 0
    assert "--onnx MODEL.onnx train an ONNX model" in " ".join(capsys.readouterr().out.split())
