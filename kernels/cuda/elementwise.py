"""Elementwise kernels over flat arrays, bias addition, dropout and the device-side counter.

One thread per element: thread i = blockIdx.x * blockDim.x + threadIdx.x handles element i, so
the 32 threads of a warp read and write 32 consecutive elements (one coalesced transaction per
array). Each output element depends only on the same element of the inputs, so every kernel is
safe in place (``out`` may be an input) and bit-identical on every call.

Like kernels/cpu/elementwise.py the flat kernels take 1-D arrays (pass ``a.reshape(-1)``, a free
view for a contiguous array); the bias kernels take the 2-D / 4-D arrays they add into. Scalars
arrive as Python numbers and reach the kernels as float64 (or int64). float16 arrays are
widened to float32 as they are loaded (``widen``): one rounding, at the store. Nothing is allocated,
copied or synchronised: a host function checks shapes and queues its launch on `stream`.
"""

import math

import numpy as np
from numba import cuda

from .. import counter_rng
from ._launch import (
    A1,
    A2,
    A3,
    check_device,
    check_dtype,
    device_function,
    each_float,
    float_dtype,
    kernel,
    launch_1d,
    widen,
)

_UNARY = each_float(f"void({A1}, {A1})")
_BINARY = each_float(f"void({A1}, {A1}, {A1})")
_ANY_DTYPE = ("float16", "float32", "float64", "int32", "int64")  # fill and copy move any of these


def _flat(name, **labelled):
    """Check 1-D device arrays of one float dtype and one size; return the size."""
    check_device(name, ndim=1, **labelled)
    float_dtype(name, **labelled)
    sizes = {a.size for a in labelled.values()}
    if len(sizes) > 1:
        raise ValueError(f"{name}: arrays must have the same number of elements")
    return sizes.pop()


# ---------------------------------------------------------------- activations
@kernel(*_UNARY)
def _relu_forward_kernel(y, x):
    i = cuda.grid(1)
    if i < x.size:
        v = widen(x[i])
        y[i] = 0 if v < 0 else v


@kernel(*_BINARY)
def _relu_backward_kernel(dx, dy, y):
    i = cuda.grid(1)
    if i < dy.size:
        dx[i] = widen(dy[i]) if widen(y[i]) > 0 else 0


@kernel(*_UNARY)
def _sigmoid_forward_kernel(y, x):
    """y[i] = 1 / (1 + exp(-x[i])) for every i < x.size: one thread per element, i =
    cuda.grid(1); the threads past the end of the array do nothing. exp only ever sees a
    non-positive number (for x < 0: e / (1 + e) with e = exp(x)), so nothing overflows and
    y is 0 or 1 at the extremes, never NaN (a NaN in x gives NaN). In-place safe: y may be x."""
    i = cuda.grid(1)
    if i < x.size:
        v = widen(x[i])
        if v >= 0:  # exp of a non-positive number: never overflows
            y[i] = 1.0 / (1.0 + math.exp(-v))
        else:
            e = math.exp(v)
            y[i] = e / (1.0 + e)


@kernel(*_BINARY)
def _sigmoid_backward_kernel(dx, dy, y):
    i = cuda.grid(1)
    if i < dy.size:
        s = widen(y[i])
        dx[i] = widen(dy[i]) * s * (1 - s)


def relu_forward(y, x, *, stream=0):
    """y = max(x, 0) (NaN propagates). Writes y; in-place safe (y may be x)."""
    n = _flat("relu_forward", y=y, x=x)
    launch_1d(_relu_forward_kernel, n, stream, y, x)


def relu_backward(dx, dy, y, *, stream=0):
    """dx = dy * (y > 0), with y the forward OUTPUT (works after an in-place forward).
    Writes dx."""
    n = _flat("relu_backward", dx=dx, dy=dy, y=y)
    launch_1d(_relu_backward_kernel, n, stream, dx, dy, y)


def sigmoid_forward(y, x, *, stream=0):
    """y = 1/(1+exp(-x)), without overflow for large |x|. Writes y; in-place safe."""
    n = _flat("sigmoid_forward", y=y, x=x)
    launch_1d(_sigmoid_forward_kernel, n, stream, y, x)


def sigmoid_backward(dx, dy, y, *, stream=0):
    """dx = dy * y * (1 - y), with y the forward output. Writes dx."""
    n = _flat("sigmoid_backward", dx=dx, dy=dy, y=y)
    launch_1d(_sigmoid_backward_kernel, n, stream, dx, dy, y)


# ---------------------------------------------------------------- arithmetic
@kernel(*_BINARY)
def _add_kernel(out, a, b):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = widen(a[i]) + widen(b[i])


@kernel(*_BINARY)
def _sub_kernel(out, a, b):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = widen(a[i]) - widen(b[i])


@kernel(*_BINARY)
def _mul_kernel(out, a, b):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = widen(a[i]) * widen(b[i])


@kernel(*each_float(f"void({A1}, float64, {A1})"))
def _axpy_kernel(y, alpha, x):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = widen(y[i]) + alpha * widen(x[i])


@kernel(*each_float(f"void({A1}, float64)"))
def _scale_kernel(y, alpha):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = widen(y[i]) * alpha


@kernel(
    *each_float(f"void({A1}, float64)"),
    "void(int32[::1], int64)",
    "void(int64[::1], int64)",
)
def _fill_kernel(y, value):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = value


@kernel(*(f"void({t}[::1], {t}[::1])" for t in _ANY_DTYPE))
def _copy_kernel(y, x):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = x[i]


def add(out, a, b, *, stream=0):
    """out = a + b. Writes out; in-place safe."""
    n = _flat("add", out=out, a=a, b=b)
    launch_1d(_add_kernel, n, stream, out, a, b)


def sub(out, a, b, *, stream=0):
    """out = a - b. Writes out; in-place safe."""
    n = _flat("sub", out=out, a=a, b=b)
    launch_1d(_sub_kernel, n, stream, out, a, b)


def mul(out, a, b, *, stream=0):
    """out = a * b (elementwise). Writes out; in-place safe."""
    n = _flat("mul", out=out, a=a, b=b)
    launch_1d(_mul_kernel, n, stream, out, a, b)


def axpy(y, alpha, x, *, stream=0):
    """y += alpha * x. Updates y in place."""
    n = _flat("axpy", y=y, x=x)
    launch_1d(_axpy_kernel, n, stream, y, float(alpha), x)


def scale(y, alpha, *, stream=0):
    """y *= alpha. Updates y in place."""
    n = _flat("scale", y=y)
    launch_1d(_scale_kernel, n, stream, y, float(alpha))


def _any_dtype(name, **arrays):
    check_device(name, ndim=1, **arrays)
    dtype = next(iter(arrays.values())).dtype
    if dtype.name not in _ANY_DTYPE:
        raise TypeError(f"{name}: dtype {dtype} is not one of {', '.join(_ANY_DTYPE)}")
    check_dtype(name, dtype, **arrays)
    return dtype


def fill(y, value, *, stream=0):
    """y[:] = value (float or int arrays). Writes y."""
    dtype = _any_dtype("fill", y=y)
    value = float(value) if dtype.kind == "f" else int(value)
    launch_1d(_fill_kernel, y.size, stream, y, value)


def copy(y, x, *, stream=0):
    """y[:] = x (float or int arrays of one dtype). Writes y."""
    _any_dtype("copy", y=y, x=x)
    if y.size != x.size:
        raise ValueError("copy: arrays must have the same number of elements")
    launch_1d(_copy_kernel, y.size, stream, y, x)


# ---------------------------------------------------------------- dropout and counters
# counter_rng.counter_uniform compiled for the device from the very source the CPU kernel compiles
# with njit, so the CPU and the GPU draw bit-identical masks.
_counter_uniform = device_function(counter_rng.counter_uniform)


@kernel(*each_float(f"void({A1}, {A1}, int64[::1], {A1}, float64, float64, uint64)"))
def _dropout_mask_kernel(y, mask, state, x, ratio, keep, seed):
    """Thread i: u = counter_uniform(seed, state[0], i); mask[i] = 0 if u < ratio else keep;
    y[i] = x[i] * mask[i]. Reads state[0], never writes it."""
    i = cuda.grid(1)
    if i < x.size:
        u = _counter_uniform(seed, np.uint64(state[0]), np.uint64(i))
        mask[i] = 0.0 if u < ratio else keep
        y[i] = widen(x[i]) * widen(
            mask[i]
        )  # the stored (rounded) factor, as the backward pass will use


@kernel("void(int32[::1])", "void(int64[::1])")
def _increment_kernel(counter):
    """counter[0] += 1, by one thread."""
    if cuda.grid(1) == 0:
        counter[0] += 1


def increment(counter, *, stream=0):
    """counter[0] += 1 for a 1-element int32/int64 array, on the device (the host never reads
    it). One thread."""
    check_device("increment", ndim=1, counter=counter)
    if counter.dtype not in (np.int32, np.int64) or counter.size != 1:
        raise TypeError(
            f"increment: need a 1-element int32/int64 array, got {counter.dtype} {counter.shape}"
        )
    _increment_kernel[1, 1, stream](counter)


def dropout_forward(y, mask, state, x, ratio, seed, *, stream=0):
    """For each i: u = counter_uniform(seed, state[0], i) (kernels/counter_rng.py);
    mask[i] = 0 if u < ratio else 1/(1-ratio) (float64, stored in mask's dtype);
    y[i] = x[i] * mask[i]; then state[0] += 1.

    Writes y and mask (y may be x); advances the dropout counter `state` (int64, 1 element) on
    the device. Bit-identical to the CPU kernel's mask for the same seed and state. Two launches on
    `stream`: the mask kernel (one thread per element, each reading state[0]), then a 1-thread
    kernel that increments state[0]; stream order guarantees no thread reads the counter after
    it moved (a bump inside the mask kernel would race with the threads still reading it)."""
    n = _flat("dropout_forward", y=y, mask=mask, x=x)
    check_device("dropout_forward", ndim=1, state=state)
    if state.dtype != np.int64 or state.size != 1:
        raise TypeError("dropout_forward: state must be a 1-element int64 array (the draw count)")
    if not 0 <= ratio <= 1:
        raise ValueError(f"dropout_forward: ratio {ratio} must be in [0, 1]")
    if not 0 <= seed < 2**64:
        raise ValueError(f"dropout_forward: seed {seed} must be in [0, 2**64)")
    keep = 1.0 / (1.0 - ratio) if ratio < 1.0 else 0.0
    seed = np.uint64(seed)
    launch_1d(_dropout_mask_kernel, n, stream, y, mask, state, x, float(ratio), keep, seed)
    _increment_kernel[1, 1, stream](state)


def dropout_backward(dx, dy, mask, *, stream=0):
    """dx = dy * mask (mask holds the factors dropout_forward wrote). Writes dx; in-place safe."""
    n = _flat("dropout_backward", dx=dx, dy=dy, mask=mask)
    launch_1d(_mul_kernel, n, stream, dx, dy, mask)


# ---------------------------------------------------------------- bias
@kernel(*each_float(f"void({A2}, {A1})"))
def _add_bias_rows_kernel(y, b):
    """Thread i: element (i // F, i % F) of y (N, F); consecutive threads, consecutive f."""
    i = cuda.grid(1)
    nrow, ncol = y.shape
    if i < nrow * ncol:
        y[i // ncol, i % ncol] = widen(y[i // ncol, i % ncol]) + widen(b[i % ncol])


@kernel(*each_float(f"void({A3}, {A1})"))
def _add_bias_nchw_kernel(y, b):
    """Thread i: element i of y viewed as (N, C, H*W); its channel is (i // HW) % C."""
    i = cuda.grid(1)
    n, c, hw = y.shape
    if i < n * c * hw:
        plane = i // hw
        at = (plane // c, plane % c, i % hw)
        y[at] = widen(y[at]) + widen(b[plane % c])


def add_bias_rows(y, b, *, stream=0):
    """y[n, f] += b[f] for y (N, F), b (F,). Updates y in place."""
    check_device("add_bias_rows", ndim=2, y=y)
    check_device("add_bias_rows", ndim=1, b=b)
    float_dtype("add_bias_rows", y=y, b=b)
    if y.shape[1] != b.shape[0]:
        raise ValueError("add_bias_rows: y.shape[1] must equal b.shape[0]")
    launch_1d(_add_bias_rows_kernel, y.size, stream, y, b)


def add_bias_nchw(y, b, *, stream=0):
    """y[n, c, h, w] += b[c] for y (N, C, H, W), b (C,). Updates y in place."""
    check_device("add_bias_nchw", ndim=4, y=y)
    check_device("add_bias_nchw", ndim=1, b=b)
    float_dtype("add_bias_nchw", y=y, b=b)
    n, c, h, w = y.shape
    if c != b.shape[0]:
        raise ValueError("add_bias_nchw: y.shape[1] must equal b.shape[0]")
    launch_1d(_add_bias_nchw_kernel, y.size, stream, y.reshape(n, c, h * w), b)
