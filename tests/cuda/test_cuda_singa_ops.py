"""The CUDA kernels behind SINGA's extra operators (pointwise functions by code, the strided
index maps, softmax, embedding, grouped convolution) against their CPU twins, on tiny shapes.
Run with a GPU or NUMBA_ENABLE_CUDASIM=1 (in a pytest process of its own)."""

import numpy as np
import pytest
from cuda_testutil import RUNS_KERNELS, needs_device, run_twins

from nnmem.kernels.contract import BINARY_CODES, UNARY_CODES
from nnmem.ops.strides import broadcast_strides, contiguous_strides, pad, reduction

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]

if RUNS_KERNELS:
    from nnmem.kernels import cuda as gpu  # noqa: F401 (imported for its registry)

FLOATS = [np.float32, np.float64]
CODES = sorted(UNARY_CODES.items())


@pytest.mark.parametrize("dtype", [np.float32])  # float64: the same source (PTX tests: both)
@pytest.mark.parametrize("name, code", CODES)
def test_unary_forward_and_backward(rng, name, code, dtype):
    x = rng.uniform(0.1, 0.9, 37).astype(dtype)  # inside every function's domain (acosh: 1 + x)
    if name == "acosh":
        x += 1
    elif name not in ("log", "sqrt", "pow"):
        x[::3] *= -1
    out = np.full_like(x, np.nan)
    (y,), _ = run_twins("unary_forward", [out, x, code, 0.7, 0.2], writes=[0], dtype=dtype)
    dy = rng.standard_normal(37).astype(dtype)
    run_twins("unary_backward", [out, dy, x, y, code, 0.7, 0.2], writes=[0], dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_strided_maps(rng, dtype):
    x = rng.standard_normal((2, 3, 4)).astype(dtype)
    perm = (2, 0, 1)
    shape = tuple(x.shape[p] for p in perm)
    strides = [contiguous_strides(x.shape)[p] for p in perm]
    args = [pad(shape, 1), pad(strides, 0), 0]
    (got,), _ = run_twins(
        "strided_gather", [np.full(24, np.nan, dtype), x.ravel(), *args], writes=[0], dtype=dtype
    )
    np.testing.assert_array_equal(got.reshape(shape), np.transpose(x, perm))
    window = [pad((2, 2), 1), pad((12, 2), 0), 5]  # x.ravel()[5::12][:, ::2]-like, one-to-one
    run_twins("strided_scatter", [x.ravel(), np.ones(4, dtype), *window], writes=[0], dtype=dtype)
    out = np.full(8, np.nan, dtype)
    run_twins(
        "reduce_sum", [out, x.ravel(), *reduction(x.shape, (2, 1, 4))], writes=[0], dtype=dtype
    )


@pytest.mark.parametrize("dtype", [np.float32])
@pytest.mark.parametrize("how", sorted(BINARY_CODES))
def test_broadcast_binary(rng, how, dtype):
    a = rng.standard_normal((2, 3, 1)).astype(dtype)
    b = rng.uniform(0.5, 1.5, (1, 4)).astype(dtype)
    shape = (2, 3, 4)
    args = [pad(shape, 1), broadcast_strides(a.shape, shape), broadcast_strides(b.shape, shape)]
    out = np.full(24, np.nan, dtype)
    (got,), _ = run_twins(
        "broadcast_binary",
        [out, a.ravel(), b.ravel(), *args, BINARY_CODES[how]],
        writes=[0],
        dtype=dtype,
    )
    want = {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b, "gt": a > b, "ge": a >= b}
    want.update(lt=a < b, le=a <= b, eq=a == b, max=np.maximum(a, b), min=np.minimum(a, b))
    if how in want:
        np.testing.assert_allclose(got.reshape(shape), want[how], rtol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("view", [(1, 5, 1), (2, 3, 4), (6, 1, 2)])
def test_softmax(rng, view, dtype):
    x = rng.standard_normal(view).astype(dtype)
    out = np.full(view, np.nan, dtype)
    (y,), _ = run_twins("softmax_forward", [out, x], writes=[0], dtype=dtype)
    dy = rng.standard_normal(view).astype(dtype)
    run_twins("softmax_backward", [out, dy, y], writes=[0], dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding(rng, dtype):
    w = rng.standard_normal((5, 3)).astype(dtype)
    ids = np.array([4, 0, 4, 2, 4], np.int32)
    run_twins("embedding_forward", [np.full((5, 3), np.nan, dtype), ids, w], writes=[0], exact=True)
    dy = rng.standard_normal((5, 3)).astype(dtype)
    run_twins(
        "embedding_backward", [np.full((5, 3), np.nan, dtype), dy, ids], writes=[0], exact=True
    )


@pytest.mark.parametrize("groups, c, o", [(2, 4, 6), (3, 3, 3)])
def test_grouped_direct_convolution(rng, groups, c, o):
    x = rng.standard_normal((2, c, 5, 4)).astype(np.float32)
    w = rng.standard_normal((o, c // groups, 3, 2)).astype(np.float32)
    dy = rng.standard_normal((2, o, 3, 5)).astype(np.float32)
    geometry = (1, 1, 0, 1, groups)
    nan = np.float32(np.nan)
    run_twins("conv2d_forward_direct", [np.full(dy.shape, nan), x, w, *geometry], writes=[0])
    run_twins("conv2d_backward_data_direct", [np.full(x.shape, nan), dy, w, *geometry], writes=[0])
    run_twins(
        "conv2d_backward_filter_direct", [np.full(w.shape, nan), dy, x, *geometry], writes=[0]
    )
