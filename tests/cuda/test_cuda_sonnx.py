"""Imported ONNX models on the CUDA device: the same converters, the CUDA kernels, the CPU's
numbers (within float rounding): a tiny CNN, BERT and GPT-2 built with onnx.helper. Run with a
GPU or NUMBA_ENABLE_CUDASIM=1 (a process of its own)."""

import numpy as np
import pytest
from cuda_testutil import needs_device
from onnx import TensorProto, helper, numpy_helper

from nnmem import device, opt, tensor
from nnmem.sonnx import SONNXModel, architectures, prepare

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]


def _cnn():
    """Conv, BatchNormalization, Relu, MaxPool, Flatten, Gemm on 2x2x6x6 inputs (tiny: the
    simulator runs every CUDA thread as a Python thread)."""
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "G", "h"], ["y"], transB=1),
    ]
    inits = [weight("W", 3, 2, 3, 3), weight("b", 3), weight("g", 3), weight("beta", 3),
             weight("mean", 3), numpy_helper.from_array(np.ones(3, np.float32), "var"),
             weight("G", 4, 27), weight("h", 4)]  # fmt: skip
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], inits,
    )  # fmt: skip
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return proto, rng.standard_normal((2, 2, 6, 6))


TINY = {"layers": 1, "hidden": 8, "heads": 2, "vocab": 11, "sequence": 4, "weights": "random"}


@pytest.mark.parametrize("name", ["cnn", "bert", "gpt2"])
def test_an_imported_model_runs_on_cuda_as_on_the_cpu(name):
    if name == "cnn":
        proto, x = _cnn()
        x = x.astype(np.float32)
    else:
        build = architectures.bert if name == "bert" else architectures.gpt2
        proto = build(**TINY, **({"intermediate": 16} if name == "bert" else {}))
        x = np.random.default_rng(0).integers(0, 11, (2, 4))
    cpu = prepare(proto, device.create_cpu_device("64MiB")).run([x])[0]
    gpu = prepare(proto, device.create_cuda_gpu()).run([x])[0]
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)


def test_an_imported_model_trains_on_cuda_as_on_the_cpu():
    proto, _ = _cnn()

    def losses(dev):
        dev.SetRandSeed(0)
        model = SONNXModel(proto)
        model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
        tx = tensor.PlaceHolder((2, 2, 6, 6), dev)
        ty = tensor.PlaceHolder((2,), dev, tensor.int32)
        model.compile([tx], is_train=True, use_graph=True)
        rng = np.random.default_rng(1)
        out = []
        for _ in range(2):
            tx.copy_from_numpy(rng.standard_normal((2, 2, 6, 6)).astype(np.float32))
            ty.copy_from_numpy(rng.integers(0, 4, 2).astype(np.int32))
            out.append(tensor.to_numpy(model(tx, ty)[1]).copy())
        return np.concatenate(out)

    np.testing.assert_allclose(
        losses(device.create_cuda_gpu()), losses(device.create_cpu_device("64MiB")), rtol=1e-4
    )
