"""Pointwise functions by code on the GPU: the twins of kernels/cpu/unary.py (read its table).

One thread per element; each computes the CPU module's own ``_unary_value`` /
``_unary_gradient`` compiled for the GPU, so both devices evaluate the same expressions (the
GPU's libdevice tanh, exp and log may differ from the CPU's libm in the last bit). A float16
value is widened to float32 before the call, so the function runs in float32 (not in Numba's
half-precision intrinsics).
"""

from numba import cuda

from ..cpu import unary as cpu_unary
from ._launch import (
    A1,
    check_device,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)

unary_value = device_function(cpu_unary._unary_value)
unary_gradient = device_function(cpu_unary._unary_gradient)


def _flat(name, **arrays):
    check_device(name, ndim=1, **arrays)
    float_dtype(name, **arrays)
    if len({a.size for a in arrays.values()}) > 1:
        raise ValueError(f"{name}: arrays must have the same number of elements")
    return next(iter(arrays.values())).size


@kernel(*each_float(f"void({A1}, {A1}, int64, float64, float64)"))
def _forward_kernel(y, x, code, a, b):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = unary_value(widen(x[i]), code, a, b)


@kernel(*each_float(f"void({A1}, {A1}, {A1}, {A1}, int64, float64, float64)"))
def _backward_kernel(dx, dy, x, y, code, a, b):
    i = cuda.grid(1)
    if i < dy.size:
        dx[i] = unary_gradient(widen(dy[i]), widen(x[i]), widen(y[i]), code, a, b)


def unary_forward(y, x, code, a, b, *, stream=0):
    """y = f(x; a, b) for the function `code`. Writes y; in-place safe."""
    n = _flat("unary_forward", y=y, x=x)
    launch_1d(_forward_kernel, n, stream, y, x, code, float(a), float(b))


def unary_backward(dx, dy, x, y, code, a, b, *, stream=0):
    """dx = dy * f'(x) from the forward input x and output y. Writes dx."""
    n = _flat("unary_backward", dx=dx, dy=dy, x=x, y=y)
    launch_1d(_backward_kernel, n, stream, dx, dy, x, y, code, float(a), float(b))
