"""kernels.cuda is the twin of kernels.cpu: both hold the kernels of kernels/contract.py, by the
same names, in the same order, with the same positional signatures (plus ``stream`` on the GPU),
and check on the host with the CPU's error types. Importing it needs no GPU (kernels compile at
their first launch), so most of this runs everywhere."""

import inspect

import numpy as np
import pytest
from cuda_testutil import needs_device, to_device

pytest.importorskip("numba.cuda")

from nnmem.kernels import contract, cpu  # noqa: E402
from nnmem.kernels import cuda as gpu  # noqa: E402


def _python_signature(f):
    return inspect.signature(getattr(f, "py_func", f))  # a CPU kernel is a Numba dispatcher


def test_the_contract_names_each_kernel_once():
    assert len(set(contract.KERNELS)) == len(contract.KERNELS)


def test_both_hold_the_contract_in_its_order():
    assert gpu.__all__ == cpu.__all__ == list(contract.KERNELS)
    for backend in (cpu, gpu):
        assert [m.__name__ for m in backend.MODULES] == [
            f"{backend.__name__}.{family}" for family in contract.FAMILIES
        ]
        for module, names in zip(backend.MODULES, contract.FAMILIES.values()):
            for name in names:
                assert getattr(backend, name) is getattr(module, name), name
        for table, value in contract.TABLES.items():
            assert getattr(backend, table) is value, table


@pytest.mark.parametrize("name", contract.KERNELS)
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
