"""Exercise 5 (tutorial 04): a CUDA kernel,
nnmem/kernels/cuda/elementwise.py:_sigmoid_forward_kernel.

One thread per element, i = cuda.grid(1); threads past the end do nothing; y[i] = 1 / (1 +
exp(-x[i])) computed so that exp never overflows (exercises/04_cuda_kernel.md). The kernel
tests need a GPU or the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1 python -m pytest -m
exercise_cuda tests/cuda``: tiny shapes, every simulated thread is a Python thread); the PTX
test needs neither, and skips on the simulator (run it without NUMBA_ENABLE_CUDASIM)."""

import os
import types

import numpy as np
import pytest
from cuda_testutil import RUNS_KERNELS, assert_close, empty_like, host, needs_device, to_device

from nnmem import autograd, device, tensor

pytestmark = pytest.mark.exercise_cuda

if RUNS_KERNELS:  # (a Numba without a CUDA target cannot even import them)
    from nnmem.kernels import cpu
    from nnmem.kernels import cuda as gpu
    from nnmem.kernels.cuda import elementwise

FLOATS = [np.float32, np.float64]


def on_cpu(x):
    """What the CPU twin writes for x."""
    y = np.empty_like(x)
    cpu.sigmoid_forward(y, x)
    return y


@needs_device
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [1, 5, 257])  # one element; a part of a block; one past a block
def test_every_element_equals_the_cpu_kernel(n, dtype):
    x = (np.random.default_rng(n).standard_normal(n) * 5).astype(dtype)
    y = empty_like(x)  # NaN everywhere: an element no thread writes shows
    gpu.sigmoid_forward(y, to_device(x))
    assert_close(host(y), on_cpu(x), dtype)


@needs_device
@pytest.mark.parametrize("dtype", FLOATS)
def test_large_inputs_neither_overflow_nor_give_nan(dtype):
    x = np.array([-1000.0, -100.0, -30.0, -1e-3, 0.0, 1e-3, 30.0, 100.0, 1000.0], dtype)
    y = empty_like(x)
    gpu.sigmoid_forward(y, to_device(x))
    out = host(y)
    assert np.all(np.isfinite(out)) and np.all((out >= 0) & (out <= 1))
    assert out[0] == 0.0 and out[-1] == 1.0 and out[4] == 0.5
    assert_close(out, on_cpu(x), dtype)


@needs_device
def test_nan_in_nan_out():
    x = np.array([np.nan, 1.0], np.float32)
    y = empty_like(x)
    gpu.sigmoid_forward(y, to_device(x))
    out = host(y)
    assert np.isnan(out[0]) and not np.isnan(out[1])


@needs_device
def test_in_place():
    x = np.linspace(-8, 8, 40).astype(np.float32)
    y = to_device(x)
    gpu.sigmoid_forward(y, y)
    assert_close(host(y), on_cpu(x))


@needs_device
def test_threads_past_the_end_write_nothing():
    """257 elements take two blocks of 256 threads: 255 threads have no element. Here the
    arrays are views at the start of longer buffers, whose tails must stay as they were."""
    n, tail = 257, 40
    x_buffer = to_device(np.ones(n + tail, np.float32))
    y_buffer = to_device(np.full(n + tail, 7.0, np.float32))
    elementwise._sigmoid_forward_kernel[2, 256](y_buffer[:n], x_buffer[:n])
    out = host(y_buffer)
    assert_close(out[:n], on_cpu(np.ones(n, np.float32)))
    assert np.all(out[n:] == 7.0)


@needs_device
def test_the_sigmoid_operator_on_the_cuda_device():
    """autograd.sigmoid runs the kernel through the device: the same values as on the CPU."""
    x_np = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32) * 10
    results = []
    for dev in (device.create_cuda_gpu("16MiB"), device.create_cpu_device("16MiB")):
        results.append(tensor.to_numpy(autograd.sigmoid(tensor.from_numpy(x_np, dev))))
    assert_close(results[0], results[1])


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="the CUDA simulator has no compile_ptx"
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_kernel_compiles_to_ptx_for_sm_80(dtype, monkeypatch):
    """The simulator runs the kernel as Python and checks no types: PTX is what a GPU runs.
    A kernel that compiles is not enough (an empty one does): it must load x and store y in
    global memory, in the array's own precision, and (float32) call the GPU's exponential."""
    pytest.importorskip("numba_cuda", reason="compiling to PTX needs numba-cuda[cu13]")
    from numba import cuda

    from nnmem.kernels.cuda import elementwise

    signature = f"void({dtype}[::1], {dtype}[::1])"
    try:
        cuda.compile_ptx(lambda a: None, "void(float32[::1])", cc=(8, 0))
    except Exception as e:  # no NVVM: numba-cuda without its [cu13] extra
        pytest.skip(f"numba.cuda cannot compile PTX here ({type(e).__name__})")
    if not cuda.is_available():  # the kernel calls device functions: see test_ptx.py's fixture
        from numba.cuda import dispatcher

        fake = types.SimpleNamespace(compute_capability=(8, 0))
        monkeypatch.setattr(dispatcher, "get_current_device", lambda: fake)
    ptx, _ = cuda.compile_ptx(elementwise._sigmoid_forward_kernel.py_func, signature, cc=(8, 0))
    assert ".target sm_80" in ptx and ".entry" in ptx
    bits = "f32" if dtype == "float32" else "f64"
    assert f"ld.global.{bits}" in ptx and f"st.global.{bits}" in ptx, "no load of x / store of y"
    if dtype == "float32":  # libdevice's expf: the hardware's base-2 exponential
        assert "ex2.approx" in ptx, "no exp"
