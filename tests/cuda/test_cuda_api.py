"""kernels.cuda is the twin of kernels.cpu: the same names, the same positional signatures plus
``stream``, the same host helpers, and host-side checks with the CPU's error types. Importing it
needs no GPU (kernels compile at their first launch), so most of this runs everywhere."""

import inspect

import numpy as np
import pytest
from cuda_testutil import needs_device, to_device

pytest.importorskip("numba.cuda")

from nnmem.kernels import cpu  # noqa: E402
from nnmem.kernels import cuda as gpu  # noqa: E402

HOST_HELPERS = [
    "conv2d_output_shape",
    "pool2d_output_shape",
    "conv2d_gemm_workspace_per_sample",
    "conv3x3_applies",
    "conv3x3_workspace_per_sample",
]


def _python_signature(f):
    return inspect.signature(getattr(f, "py_func", f))  # a CPU kernel is a Numba dispatcher


def test_the_same_names_in_the_same_order():
    assert gpu.__all__ == cpu.__all__
    assert len(set(gpu.__all__)) == len(gpu.__all__)
    assert [m.__name__.rpartition(".")[2] for m in gpu.MODULES] == [
        m.__name__.rpartition(".")[2] for m in cpu.MODULES
    ]
    for module, twin in zip(gpu.MODULES, cpu.MODULES):
        assert module.__all__ == twin.__all__, module.__name__


def test_host_helpers_are_the_cpu_functions():
    for name in HOST_HELPERS:
        assert getattr(gpu, name) is getattr(cpu, name)


@pytest.mark.parametrize("name", [n for n in cpu.__all__ if n not in HOST_HELPERS])
def test_same_positional_signature_plus_stream(name):
    want = _python_signature(getattr(cpu, name)).parameters
    got = inspect.signature(getattr(gpu, name)).parameters
    positional = [p for p in got.values() if p.kind != p.KEYWORD_ONLY]
    assert [(p.name, p.default) for p in positional] == [(p.name, p.default) for p in want.values()]
    keyword = [p for p in got.values() if p.kind == p.KEYWORD_ONLY]
    assert [(p.name, p.default) for p in keyword] == [("stream", 0)]


def test_host_arrays_are_refused_before_any_launch():
    """A NumPy array would be copied to the device and back around every launch."""
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="not a CUDA device array"):
        gpu.relu_forward(x, x)
    with pytest.raises(TypeError, match="not a CUDA device array"):
        gpu.matmul(np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 2)))


@needs_device
@pytest.mark.usefixtures("launches_match_the_registry")
def test_checks_use_the_cpu_error_types():
    f32 = to_device(np.zeros(6, np.float32))
    f64 = to_device(np.zeros(6, np.float64))
    with pytest.raises(TypeError, match="dtype"):
        gpu.add(f32, f32, f64)
    with pytest.raises(ValueError, match="same number of elements"):
        gpu.add(f32, f32, to_device(np.zeros(5, np.float32)))
    with pytest.raises(ValueError, match="1-D"):
        gpu.relu_forward(f32.reshape(2, 3), f32.reshape(2, 3))
    strided = to_device(np.zeros((4, 6), np.float32))[:, :3]
    with pytest.raises(ValueError, match="C-contiguous"):
        gpu.sum_rows(to_device(np.zeros(3, np.float32)), strided)
    a = to_device(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="matmul"):
        gpu.matmul(to_device(np.zeros((2, 2), np.float32)), a, a)
    with pytest.raises(TypeError, match="matmul"):
        gpu.matmul(to_device(np.zeros((2, 2), np.float64)), a, a, trans_b=True)
    x = to_device(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(ValueError, match="pool2d"):
        gpu.avgpool2d_forward(to_device(np.zeros((1, 1, 2, 2), np.float32)), x, 2, 2, 2, 2, 2, 0)
    with pytest.raises(ValueError, match="workspace"):
        w = to_device(np.zeros((1, 1, 3, 3), np.float32))
        y = to_device(np.zeros((1, 1, 2, 2), np.float32))
        gpu.conv2d_forward_gemm(y, x, w, to_device(np.zeros(3, np.float32)), 1, 1, 0, 0)
    with pytest.raises(TypeError, match="int64"):
        gpu.dropout_forward(f32, f32, to_device(np.zeros(1, np.int32)), f32, 0.5, 1)
    with pytest.raises(TypeError, match="int32"):
        steps = to_device(np.zeros(1, np.int64))
        gpu.adam_update(f32, f32, f32, f32, steps, 0.1, 0.9, 0.999, 1e-8, 0.0)
