"""Hostile and broken ONNX files: each is refused with one line naming the problem, before
any weight is copied or any step runs, with bounded memory; weights stored beside a model are
read when present and left out (shapes only, enough to plan) when absent."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nnmem import autograd, device, sonnx
from nnmem.planning import plan
from nnmem.sonnx import OnnxFileError, Unsupported


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _linear(weights=None):
    """y = relu(x @ W + b), x (2, 4), W (4, 3)."""
    rng = np.random.default_rng(0)
    w = weights if weights is not None else rng.standard_normal((4, 3)).astype(np.float32)
    return _model(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
            helper.make_node("Add", ["h", "b"], ["z"], name="add"),
            helper.make_node("Relu", ["z"], ["y"], name="relu"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.ones(3, np.float32), "b")],
    )


def _save(model, path):
    path.write_bytes(model.SerializeToString())
    return path


def test_a_model_runs_as_numpy_says(tmp_path):
    model = _linear()
    rep = sonnx.prepare(sonnx.load(_save(model, tmp_path / "m.onnx")))
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    w = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(rep.run([x])[0], np.maximum(x @ w + 1, 0), rtol=1e-6)


def test_a_truncated_file_is_refused_in_one_line(tmp_path):
    data = _linear().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxFileError, match="truncated or corrupt") as e:
        sonnx.load(path)
    assert "\n" not in str(e.value)


def test_garbage_and_directories_are_refused(tmp_path):
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 64)
    with pytest.raises(OnnxFileError):
        sonnx.load(tmp_path / "junk.onnx")
    with pytest.raises(OnnxFileError, match="directory"):
        sonnx.load(tmp_path)


def test_a_huge_declared_initializer_is_refused_before_any_allocation(tmp_path):
    model = _linear()
    huge = model.graph.initializer[0]
    huge.dims[:] = [2**20, 2**20]  # 2**40 elements declared, 48 bytes stored
    with pytest.raises(OnnxFileError, match="declares 1099511627776 elements"):
        sonnx.load(_save(model, tmp_path / "huge.onnx"))
    huge.dims[:] = [4, 4]  # 16 declared, 12 stored
    with pytest.raises(OnnxFileError, match="needs 16 values, the file stores 12"):
        sonnx.load(_save(model, tmp_path / "short.onnx"))


def test_absurd_shapes_from_constants_are_refused_at_import():
    shape = numpy_helper.from_array(np.array([2**40], np.int64), "shape")
    model = _model(
        [helper.make_node("ConstantOfShape", ["shape"], ["c"], name="bomb"),
         helper.make_node("Add", ["x", "c"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )  # fmt: skip
    with pytest.raises(OnnxFileError, match="'bomb' .* would make a value of shape"):
        sonnx.prepare(model)


def test_a_cycle_is_refused_naming_its_nodes():
    model = _model(
        [helper.make_node("Relu", ["b"], ["a"], name="first"),
         helper.make_node("Relu", ["a"], ["b"], name="second")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])],
    )  # fmt: skip
    with pytest.raises(OnnxFileError, match=r"cycle through node\(s\) \['first', 'second'\]"):
        sonnx.prepare(model)


def test_an_unsupported_operator_is_named_at_import_with_its_opset():
    model = _model(
        [helper.make_node("Hardmax", ["x"], ["y"], name="odd")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    with pytest.raises(Unsupported) as e:
        sonnx.prepare(model)
    assert (
        str(e.value) == "node 'odd' (Hardmax, opset 17): operator Hardmax is not supported by nnmem"
    )


def test_an_unknown_attribute_is_named_at_import():
    model = _linear()
    model.graph.node[2].attribute.append(helper.make_attribute("alpha", 0.5))
    with pytest.raises(
        Unsupported, match=r"node 'relu' \(Relu, opset 17\): attribute\(s\) \['alpha'\]"
    ):
        sonnx.prepare(model)


def test_external_weights_are_read_when_present_and_planned_without_when_absent(tmp_path):
    model = _linear()
    expected = numpy_helper.to_array(model.graph.initializer[0])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.bin", size_threshold=0)  # fmt: skip
    x = np.ones((2, 4), np.float32)
    loaded = sonnx.load(tmp_path / "m.onnx")
    np.testing.assert_allclose(sonnx.prepare(loaded).run([x])[0], np.maximum(x @ expected + 1, 0))
    without = sonnx.load(tmp_path / "m.onnx", load_external_data=False)
    assert plan(sonnx.SONNXModel(without), (2, 4), offload="none").techniques[1].peak_bytes > 0
    with pytest.raises(OnnxFileError, match="weights were not loaded"):
        sonnx.prepare(without, device.create_cpu_device("16MiB")).run([x])
    os.remove(tmp_path / "m.bin")  # absent beside the model: the shapes alone
    assert plan(sonnx.SONNXModel(sonnx.load(tmp_path / "m.onnx")), (2, 4), offload="none")


def test_weights_must_lie_beside_the_model_and_be_whole(tmp_path):
    model = _linear()
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.bin", size_threshold=0)  # fmt: skip
    data = (tmp_path / "m.bin").read_bytes()
    (tmp_path / "m.bin").write_bytes(data[:20])
    with pytest.raises(OnnxFileError, match="the weight file is truncated"):
        sonnx.load(tmp_path / "m.onnx")
    escaping = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    for t in escaping.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = "../../etc/passwd"
    with pytest.raises(OnnxFileError, match="outside the model's folder"):
        sonnx.load(_save(escaping, tmp_path / "escape.onnx"))


def test_run_is_inference_whatever_the_training_flag():
    """prepare().run is the backend's inference: a training flag left on by other code must
    not make BatchNorm use the batch's statistics (or update the running ones)."""
    rng = np.random.default_rng(0)
    stats = [numpy_helper.from_array(rng.uniform(0.5, 1.5, 2).astype(np.float32), n)
             for n in ("scale", "bias", "mean", "var")]  # fmt: skip
    model = _model(
        [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2, 2, 2])],
        stats,
    )
    x = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
    scale, bias, mean, var = (numpy_helper.to_array(t)[:, None, None] for t in stats)
    expected = (x - mean) / np.sqrt(var + 1e-5) * scale + bias
    autograd.training = True
    try:
        got = sonnx.prepare(model, device.create_cpu_device("16MiB")).run([x])[0]
        assert autograd.training  # the caller's flag is given back
    finally:
        autograd.training = False
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
