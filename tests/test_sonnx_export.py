"""ONNX export (nnmem/sonnx/export.py, SINGA's sonnx.to_onnx) and the trace it reads
(operation.tracing): every zoo model, exported, passes ONNX's checker and computes in
onnxruntime what it computes in nnmem, at the traced batch size and another; export changes
no parameter, statistic or mode; an operator with no ONNX form is a one-line error."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from nnmem import autograd, device, layer, model, operation, tensor
from nnmem.models import create_model
from nnmem.sonnx.export import ExportError, SingaFrontend, export, to_onnx

ort = pytest.importorskip("onnxruntime")

# Small forms of every zoo model: (create_model name, kwargs, input shape at batch 2).
ZOO = {
    "cnn": ("cnn", {"num_classes": 10, "num_channels": 1}, (2, 1, 28, 28)),
    "mlp": ("mlp", {"hidden": (16, 8), "num_classes": 5}, (2, 1, 8, 8)),
    "resnet-cifar": ("resnet", {"depth": 8, "width": 0.25}, (2, 3, 16, 16)),
    "resnet-imagenet": (
        "resnet",
        {"depth": 14, "stem": "imagenet", "block": "bottleneck", "width": 1 / 16},
        (2, 3, 32, 32),
    ),
    "alexnet": ("alexnet", {"width": 1 / 20, "num_classes": 10}, (2, 3, 67, 67)),
    "vgg16": ("vgg16", {"width": 1 / 20, "num_classes": 10}, (2, 3, 32, 32)),
    "densenet": ("densenet", {"growth": 4, "layers_per_block": 2, "blocks": 2}, (2, 3, 16, 16)),
    "inception": ("inception", {"width": 0.1, "modules": 2}, (2, 3, 16, 16)),
}


def randomized(m, shape, seed=0):
    """m compiled on the CPU for `shape`, with noise (std 0.1) added to every parameter and
    state, so that biases (zeros) and BatchNorm's statistics (0 and 1) count in the
    comparison, while the activations keep the size the layers' initialisation gives them."""
    dev = device.get_default_device()
    m.compile([tensor.from_numpy(np.zeros(shape, np.float32), dev)], is_train=False)
    rng = np.random.default_rng(seed)
    noisy = {
        k: tensor.to_numpy(t) + 0.1 * rng.standard_normal(t.shape)
        for k, t in m.get_states().items()
    }
    m.set_states(noisy)
    return m


def batch(shape, n, seed):
    x = np.random.default_rng(seed).standard_normal((n,) + shape[1:]).astype(np.float32)
    return tensor.from_numpy(x, device.get_default_device())


def assert_close(got, expected):
    """Equal within 1e-5, relative to each element and to the output's largest magnitude: the
    two runtimes sum in different orders, and a logit near zero among logits of size 30
    carries the rounding of the larger terms that cancelled into it."""
    assert got.shape == expected.shape
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * scale)


def onnxruntime_run(proto, x):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    return session.run(None, {name: tensor.to_numpy(x)})


@pytest.mark.parametrize("case", sorted(ZOO))
def test_zoo_model_runs_the_same_in_onnxruntime(case):
    name, kwargs, shape = ZOO[case]
    m = randomized(create_model(name, **kwargs), shape)
    m.eval()
    x = batch(shape, 2, seed=1)
    proto = export(m, x)
    onnx.checker.check_model(proto, full_check=True)  # with ONNX's shape inference
    assert proto.opset_import[0].version >= 17

    # parameters and running statistics: initializers by their dotted names, same values
    states = {k: tensor.to_numpy(t) for k, t in m.get_states().items()}
    weights = {w.name: onnx.numpy_helper.to_array(w) for w in proto.graph.initializer}
    assert set(weights) == set(states)
    for k, v in states.items():
        np.testing.assert_array_equal(weights[k], v)
    # the first dimension is symbolic: any batch size runs
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"

    for x in (x, batch(shape, 3, seed=2)):
        (got,) = onnxruntime_run(proto, x)
        assert_close(got, tensor.to_numpy(m.forward(x)))


class Odds(model.Model):
    """The operators no zoo model uses: a grouped strided convolution with a bias, max and
    average pooling with padding (on negative values), Gemm (transposed weights, broadcast
    bias), sigmoid, tanh, a reshape, a difference, a scale and a softmax."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 6, 3, stride=2, padding=1, group=2)
        self.max_pool = layer.MaxPool2d(3, 1, 1)
        self.avg_pool = layer.AvgPool2d(3, 2, 1)
        self.gemm = layer.Gemm(5)

    def forward(self, x):
        y = self.conv(x)
        y = autograd.tanh(self.max_pool(y)) - autograd.sigmoid(y) * 0.5
        y = self.avg_pool(y)
        y = y + (y * 4.0).as_type(tensor.int32).as_type(tensor.float32)  # truncation, as ONNX's
        y = autograd.reshape(y, (y.shape[0], -1))
        return autograd.softmax(self.gemm(y))


def test_operators_beyond_the_zoo_run_the_same_in_onnxruntime():
    shape = (2, 4, 9, 9)
    m = randomized(Odds(), shape)
    m.eval()
    x = batch(shape, 2, seed=3)
    proto = export(m, x, model_name="odds")
    onnx.checker.check_model(proto, full_check=True)
    ops = {n.op_type for n in proto.graph.node}
    assert {"Conv", "MaxPool", "AveragePool", "Gemm", "Tanh", "Sigmoid"} <= ops
    assert {"Sub", "Mul", "Reshape", "Softmax", "Add", "Cast"} <= ops
    assert proto.graph.name == "odds"
    for x in (x, batch(shape, 3, seed=4)):
        (got,) = onnxruntime_run(proto, x)
        assert_close(got, tensor.to_numpy(m.forward(x)))


def test_export_changes_no_parameter_statistic_or_mode(tmp_path):
    name, kwargs, shape = ZOO["resnet-cifar"]
    m = create_model(name, **kwargs)
    m.compile([batch(shape, 2, seed=0)], is_train=True)  # left training: BatchNorm would update
    before = {k: tensor.to_numpy(t).tobytes() for k, t in m.get_states().items()}
    path = tmp_path / "resnet.onnx"
    proto = export(m, batch(shape, 2, seed=5), path=str(path))
    after = {k: tensor.to_numpy(t).tobytes() for k, t in m.get_states().items()}
    assert after == before
    assert m.training and autograd.training
    assert onnx.load(str(path)) == proto
    m.eval()
    autograd.training = True  # the thread's flag, not the model's: export puts it back too
    export(m, batch(shape, 2, seed=5))
    assert not m.training and autograd.training


def test_to_onnx_reads_the_trace_of_the_block_it_runs_in():
    assert to_onnx == SingaFrontend.singa_to_onnx_model
    name, kwargs, shape = ZOO["mlp"]
    m = randomized(create_model(name, **kwargs), shape)
    m.eval()
    x = batch(shape, 2, seed=6)
    with operation.tracing() as trace:
        y = m.forward(x)
        inside = to_onnx([x], [y])
    assert [n.op_type for n in inside.graph.node] == [
        "Flatten", "MatMul", "Add", "Relu", "MatMul", "Add", "Relu", "MatMul", "Add",
    ]  # fmt: skip
    assert to_onnx([x], [y], trace=trace) == inside
    with pytest.raises(ExportError, match="operation.tracing"):
        to_onnx([x], [y])  # no trace: the block is over


def test_tracing_records_every_call_in_its_block_only():
    x = batch((2, 3), 2, seed=7)
    autograd.training = True  # a traced call records whatever the training flag
    with operation.tracing() as outer:
        y = autograd.relu(x)
        with operation.tracing() as inner:
            z = autograd.sigmoid(y)
        assert operation.active_trace() is outer
    autograd.relu(x)  # outside any block: recorded nowhere
    assert operation.active_trace() is None
    assert len(outer) == 1 and len(inner) == 1
    op, xs, ys = outer[0]
    assert type(op).__name__ == "ReLU" and xs[0] is x and ys[0] is y
    op, xs, ys = inner[0]
    assert type(op).__name__ == "Sigmoid" and xs[0] is y and ys[0] is z


class Chop(layer.Layer):
    def forward(self, x):
        return autograd.slice(x, [0], [1])


class Chopped(model.Model):
    def __init__(self):
        super().__init__()
        self.fc = layer.Linear(4)
        self.chop = Chop()

    def forward(self, x):
        return self.chop(self.fc(x))


def test_an_operator_with_no_mapping_is_a_one_line_error_naming_it_and_its_layer():
    m = randomized(Chopped(), (2, 3))
    with pytest.raises(ExportError, match=r"operator Slice \(in 'chop:Slice'\)") as error:
        export(m, batch((2, 3), 2, seed=8))
    assert "\n" not in str(error.value)
    with pytest.raises(ExportError, match=r"Pointwise\(leakyrelu\)"):
        with operation.tracing():
            to_onnx([x := batch((2, 3), 2, seed=9)], [autograd.leakyrelu(x)])


def _imported_then_exported(proto, x):
    """(nnmem's output of the imported `proto`, onnxruntime's of it exported again)."""
    ort = pytest.importorskip("onnxruntime")
    from nnmem.sonnx import SONNXModel

    dev = device.create_cpu_device("64MiB")
    model = SONNXModel(proto)
    tx = tensor.PlaceHolder(x.shape, dev, np.int32 if x.dtype.kind == "i" else np.float32)
    model.compile([tx], is_train=False, use_graph=False)
    tx.copy_from_numpy(x)
    ours = tensor.to_numpy(model(tx)[0])
    exported = export(model, tx)
    onnx.checker.check_model(exported, full_check=True)
    session = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    return ours, session.run(None, {session.get_inputs()[0].name: x})[0]


def test_an_imported_transformer_exports_back():
    """BERT's operators (Gather of ids, LayerNormalization, MatMul of (B, S, K) by (K, N),
    Softmax on the last axis, Erf) go back to ONNX as they came."""
    from nnmem.sonnx import architectures

    bert = architectures.bert(
        layers=1, hidden=16, heads=2, intermediate=32, vocab=50, sequence=8, weights="random"
    )
    ids = np.random.default_rng(0).integers(0, 50, (2, 8)).astype(np.int32)
    ours, theirs = _imported_then_exported(bert, ids)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_onnx_window_options_export_back():
    """Asymmetric pads, a dilated convolution, ceil-mode pooling, an average that divides by
    the real elements (ONNX's default), ONNX's LRN window and a Gemm with transB."""
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[0, 1, 1, 2], dilations=[2, 1]),
        helper.make_node("LRN", ["c"], ["l"], size=3, alpha=1e-2, beta=0.75, bias=2.0),
        helper.make_node(
            "AveragePool",
            ["l"],
            ["a"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            ceil_mode=1,
        ),  # fmt: skip
        helper.make_node("MaxPool", ["a"], ["m"], kernel_shape=[2, 2], ceil_mode=1),
        helper.make_node("Flatten", ["m"], ["f"]),
        helper.make_node("Gemm", ["f", "G"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "windows",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 2, 9, 9])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [weight("W", 3, 2, 3, 3), weight("G", 5, 45)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ours, theirs = _imported_then_exported(
        proto, rng.standard_normal((2, 2, 9, 9)).astype(np.float32)
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
