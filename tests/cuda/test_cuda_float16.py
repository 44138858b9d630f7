"""float16 storage on the GPU: every CUDA kernel family on float16 arrays against the CPU's
float16 path (kernels.cpu wrapped by nnmem.devices.half.widened: float32 copies, rounded once
into the arrays written), and a small model trained on the CUDA device with float16 tensors.

The CUDA kernels widen each float16 value as they load it and compute as their float32 twins
do, so one-element-per-thread kernels give the CPU's float16 bits, and sums (taken in another
order) are within a float16 ulp. Run with a GPU or NUMBA_ENABLE_CUDASIM=1."""

import numpy as np
import pytest
from cuda_testutil import RUNS_KERNELS, host, needs_device, to_device

from nnmem import device, opt, tensor
from nnmem.devices.half import widened
from nnmem.kernels import cpu, sizes
from nnmem.kernels.contract import BINARY_CODES, UNARY_CODES
from nnmem.models import create_model
from nnmem.ops.strides import contiguous_strides, pad, reduction

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]

if RUNS_KERNELS:
    from nnmem.kernels import cuda as gpu

F16 = np.float16


def _randn(rng, shape):
    return rng.standard_normal(shape).astype(F16)


def _nan(shape, dtype=F16):
    return np.full(shape, np.nan, dtype)


def half_twins(name, args, writes, ulps=0, of_max=False):
    """kernels.cuda.<name> on device copies of `args` against kernels.cpu.<name> run through
    devices.half.widened on host copies; the arrays at `writes` must agree: bit for bit when
    ulps == 0, else within `ulps` float16 ulps of the CPU's value (of the largest value, with
    `of_max`: a sum of rounded terms that cancel is off by the terms' ulps, not its own; float64
    outputs: 1e-6).
    Returns the CUDA results of the written arrays."""
    on_cpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    order = list(writes) + [i for i in arrays if i not in writes]  # widened: writes first

    def kernel(*copies):
        full = list(on_cpu)
        for i, a in zip(order, copies):
            full[i] = a
        getattr(cpu, name)(*full)

    widened(kernel, len(writes))(*[on_cpu[i] for i in order])
    on_gpu = [to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    getattr(gpu, name)(*on_gpu)
    got = []
    for i in writes:
        want, have = on_cpu[i], host(on_gpu[i])
        assert have.dtype == want.dtype, f"{name}: argument {i}"
        if want.dtype != F16 or ulps == 0:
            rtol = 1e-6 if want.dtype == np.float64 else 0
            np.testing.assert_allclose(have, want, rtol=rtol, atol=0, err_msg=f"{name}: {i}")
        else:
            w, h = want.astype(np.float32), have.astype(np.float32)
            tol = ulps * np.spacing(np.abs(want).max() if of_max else np.abs(want)).astype(
                np.float32
            )
            bad = ~((np.abs(h - w) <= tol) | (np.isnan(h) & np.isnan(w)))
            assert not bad.any(), f"{name}: argument {i}: {h[bad][:4]} vs {w[bad][:4]}"
        got.append(have)
    return got


def test_float_dtype_takes_float16_and_refuses_int():
    x = to_device(np.ones(3, F16))
    gpu.relu_forward(x, x)
    with pytest.raises(TypeError, match="float16/float32/float64"):
        gpu.relu_forward(to_device(np.ones(3, np.int32)), to_device(np.ones(3, np.int32)))


# ---------------------------------------------------------------- one element per thread
def test_elementwise(rng):
    x, a, b = (_randn(rng, 257) for _ in range(3))
    out = _nan(257)
    for name in ("relu_forward", "sigmoid_forward"):
        half_twins(name, [out, x], [0])
    for name in ("relu_backward", "sigmoid_backward", "add", "sub", "mul", "dropout_backward"):
        half_twins(name, [out, a, b], [0])
    half_twins("axpy", [a, -0.3, b], [0])
    half_twins("scale", [a, 3.1], [0])
    half_twins("fill", [out, 2.5], [0])
    half_twins("copy", [out, x], [0])
    half_twins("add_bias_rows", [_randn(rng, (3, 5)), _randn(rng, 5)], [0])
    half_twins("add_bias_nchw", [_randn(rng, (2, 3, 2, 2)), _randn(rng, 3)], [0])
    state = np.array([3], np.int64)
    half_twins("dropout_forward", [out, _nan(257), state, x, 0.25, 7], [0, 1, 2], ulps=1)


def test_unary_strided_concat_scatter_embedding_cast(rng):
    x = rng.uniform(0.1, 0.9, 37).astype(F16)
    dy = _randn(rng, 37)
    for code in (UNARY_CODES["tanh"], UNARY_CODES["exp"], UNARY_CODES["gelu"]):
        (y,) = half_twins("unary_forward", [_nan(37), x, code, 0.7, 0.2], [0], ulps=1)
        half_twins("unary_backward", [_nan(37), dy, x, y, code, 0.7, 0.2], [0], ulps=1)
    x3 = _randn(rng, (2, 3, 4))
    perm = (2, 0, 1)
    shape = pad(tuple(x3.shape[p] for p in perm), 1)
    strides = pad([contiguous_strides(x3.shape)[p] for p in perm], 0)
    half_twins("strided_gather", [_nan(24), x3.ravel(), shape, strides, 0], [0])
    half_twins("reduce_sum", [_nan(8), x3.ravel(), *reduction(x3.shape, (2, 1, 4))], [0], ulps=1)
    bshape = pad((2, 3, 4), 1)
    astrides, bstrides = pad((3, 1, 0), 0), pad((0, 0, 1), 0)
    a, b = _randn(rng, 6), rng.uniform(0.5, 1.5, 4).astype(F16)
    for code in (BINARY_CODES["mul"], BINARY_CODES["div"], BINARY_CODES["max"]):
        half_twins("broadcast_binary", [_nan(24), a, b, bshape, astrides, bstrides, code], [0])
    y, xs = _randn(rng, (3, 9)), _randn(rng, (3, 4))
    half_twins("concat_copy_in", [y, xs, 5], [0])
    half_twins("concat_copy_out", [_nan((3, 4)), y, 2], [0])
    ids = np.array([1, 3, 0, 2], np.int32)  # distinct ids: one addition per element
    table = _randn(rng, (4, 5))
    half_twins("embedding_forward", [_nan((4, 5)), ids, table], [0])
    half_twins("embedding_backward", [_nan((4, 5)), _randn(rng, (4, 5)), ids], [0])
    for dtype in (np.float32, np.float64, np.int32):
        wide = rng.uniform(-50, 50, 9).astype(dtype)
        half_twins("cast", [_nan(9), wide], [0])
        half_twins("cast", [np.zeros(9, dtype), wide.astype(F16)], [0])


def test_scatter_elements(rng):
    x, updates = _randn(rng, 12), _randn(rng, 3)
    indices = np.array([2, 0, 3], np.int32)
    geometry = (pad((3,), 1), pad((4,), 0), 1, 4)  # rows 0..2 of a (3, 4), one index per row
    half_twins("scatter_elements_forward", [_nan(12), x, indices, updates, *geometry], [0])
    half_twins("scatter_elements_backward", [_nan(12), x, indices, *geometry], [0])


@pytest.mark.filterwarnings("ignore:invalid value")  # the simulator computes inf - inf
def test_count_nonfinite_sees_float16_infinities():
    count = to_device(np.zeros(1, np.int32))
    gpu.count_nonfinite(count, to_device(np.array([1, np.inf, -np.inf, np.nan, 6e4], F16)))
    assert host(count).tolist() == [3]


# ---------------------------------------------------------------- sums: within one ulp
@pytest.mark.parametrize("trans", [(False, False), (True, True)])
def test_matmul(rng, trans):
    a, b = _randn(rng, (7, 5) if trans[0] else (5, 7)), _randn(rng, (3, 7) if trans[1] else (7, 3))
    half_twins("matmul", [_nan((5, 3)), a, b, *trans], [0], ulps=1)


def test_reductions(rng):
    half_twins("sum_rows", [_nan(5), _randn(rng, (9, 5))], [0], ulps=1)
    half_twins("bias_grad_nchw", [_nan(3), _randn(rng, (2, 3, 4, 5))], [0], ulps=1)


def test_convolution(rng):
    x, w = _randn(rng, (2, 3, 6, 5)), _randn(rng, (4, 3, 3, 3))
    geometry = (2, 1, 1, 1)  # sh, sw, ph, pw
    ys = sizes.conv2d_output_shape(*x.shape, 4, 3, 3, *geometry)
    dy = _randn(rng, ys)
    half_twins("conv2d_forward_direct", [_nan(ys), x, w, *geometry], [0], ulps=1)
    half_twins("conv2d_backward_data_direct", [_nan(x.shape), dy, w, *geometry], [0], ulps=1)
    half_twins("conv2d_backward_filter_direct", [_nan(w.shape), dy, x, *geometry], [0], ulps=1)
    ws = _nan(sizes.conv2d_gemm_sample_group(2, *ys[2:], "cuda") * (27 + 4) * ys[2] * ys[3])
    # the GEMM path stores cols and its transposed buffer in float16 too: a few more roundings
    for name, args in (
        ("conv2d_forward_gemm", [_nan(ys), x, w]),
        ("conv2d_backward_data_gemm", [_nan(x.shape), dy, w]),
        ("conv2d_backward_filter_gemm", [_nan(w.shape), dy, x]),
    ):
        half_twins(name, [*args, ws, *geometry], [0], ulps=2, of_max=True)
    cols = _nan((27, 2 * ys[2] * ys[3]))
    (cols,) = half_twins("im2col", [cols, x, 3, 3, *geometry], [0])
    half_twins("col2im", [_nan(x.shape), cols, 3, 3, *geometry], [0], ulps=1)
    x8, dy8 = _randn(rng, (1, 2, 4, 4)), _randn(rng, (1, 4, 4, 4))
    w3 = _randn(rng, (4, 2, 3, 3))
    half_twins("conv3x3_forward", [_nan((1, 4, 4, 4)), x8, w3, _nan(4096)], [0], ulps=1)
    half_twins("conv3x3_backward_filter", [_nan(w3.shape), dy8, x8, _nan(4096)], [0], ulps=1)
    half_twins(
        "conv3x3s2_backward_data", [_nan(x8.shape), dy8[..., :2, :2], w3, _nan(4096)], [0], 1
    )
    w1 = _randn(rng, (4, 2, 1, 1))
    half_twins("conv1x1_forward", [_nan((1, 4, 4, 4)), x8, w1, _nan(4096), 1, 1], [0], ulps=1)


def test_pooling(rng):
    x = _randn(rng, (2, 3, 7, 6))
    window = (3, 3, 2, 2, 1, 1)
    ys = sizes.pool2d_output_shape(*x.shape, *window)
    argmax = np.full(ys, -1, np.int32)
    _, am = half_twins("maxpool2d_forward", [_nan(ys), argmax, x, *window], [0, 1])
    half_twins("maxpool2d_backward", [_nan(x.shape), _randn(rng, ys), am, *window], [0])
    half_twins("avgpool2d_forward", [_nan(ys), x, *window], [0], ulps=1)
    half_twins("avgpool2d_backward", [_nan(x.shape), _randn(rng, ys), *window], [0], ulps=1)


def _bn_arrays(rng, shape):
    c = shape[1]
    x = _randn(rng, shape) * F16(2) + F16(1)
    running = [_randn(rng, c), np.abs(_randn(rng, c)) + F16(0.5)]
    return x, _randn(rng, c), _randn(rng, c), running


def test_batchnorm_and_its_fused_forms(rng):
    shape = (2, 2, 3, 5)  # one block of 128 threads per channel: few channels, quick
    x, gamma, beta, running = _bn_arrays(rng, shape)
    saved = [_nan(2, np.float64), _nan(2, np.float64)]
    args = [_nan(shape), *saved, *running, x, gamma, beta, 0.9, 1e-5]
    _, mean, invstd, *_ = half_twins("batchnorm2d_forward_train", args, [0, 1, 2, 3, 4], 1)
    half_twins("batchnorm2d_forward_apply", [_nan(shape), x, gamma, beta, mean, invstd], [0], 1)
    args = [_nan(shape), x, gamma, beta, *running, 1e-5]
    half_twins("batchnorm2d_forward_infer", args, [0], ulps=1)
    dy = _randn(rng, shape)
    args = [_nan(shape), _nan(2), _nan(2), dy, x, gamma, mean, invstd]
    half_twins("batchnorm2d_backward", args, [0, 1, 2], ulps=1)
    args = [_nan(shape), *saved, *running, x, gamma, beta, 0.9, 1e-5]
    (z, *_) = half_twins("batchnorm2d_relu_forward_train", args, [0, 1, 2, 3, 4], ulps=1)
    args = [_nan(shape), _nan(2), _nan(2), dy, z, x, gamma, mean, invstd]
    half_twins("batchnorm2d_relu_backward", args, [0, 1, 2], ulps=1)
    half_twins("add_bias_relu_nchw", [_randn(rng, shape), gamma], [0])
    half_twins("relu_backward_sum_rows", [_nan((3, 5)), _nan(5), dy[0, 0], z[0, 0]], [0, 1], 1)


def test_layernorm_and_lrn(rng):
    x, scale, dy = _randn(rng, (3, 10)), _randn(rng, 10), _randn(rng, (3, 10))
    _, mean, rstd = half_twins(
        "layernorm_forward", [_nan((3, 10)), _nan(3), _nan(3), x, scale, 1e-5], [0, 1, 2], 1
    )
    half_twins("layernorm_backward_data", [_nan((3, 10)), dy, x, mean, rstd, scale], [0], ulps=1)
    half_twins("layernorm_backward_scale", [_nan(10), dy, x, mean, rstd], [0], ulps=1)
    shape = (2, 5, 3, 4)
    x4, dy4 = _randn(rng, shape), _randn(rng, shape)
    (y,) = half_twins("lrn_forward", [_nan(shape), x4, 3, 1e-2, 0.75, 2.0], [0], ulps=1)
    half_twins("lrn_backward", [_nan(shape), dy4, x4, y, 3, 1e-2, 0.75, 2.0], [0], ulps=1)


def test_softmax_and_losses(rng):
    x, dy = _randn(rng, (2, 5, 3)), _randn(rng, (2, 5, 3))
    # the forward rounds exp(x - max) to float16 where it stores it, before the division
    (y,) = half_twins("softmax_forward", [_nan(x.shape), x], [0], ulps=2)
    half_twins("softmax_backward", [_nan(x.shape), dy, y], [0], ulps=1)
    logits, labels = _randn(rng, (4, 6)) * F16(3), np.array([0, 5, 2, 2], np.int32)
    dloss = np.ones(1, F16)
    args = [_nan(1), _nan((4, 6)), logits, labels]
    _, prob = half_twins("softmax_cross_entropy_forward", args, [0, 1], ulps=1)
    half_twins("softmax_cross_entropy_backward", [_nan((4, 6)), dloss, prob, labels], [0], 1)
    onehot = np.eye(6, dtype=F16)[labels]  # float16 targets, as a float16 model makes them
    args = [_nan(1), _nan((4, 6)), logits, onehot]
    half_twins("softmax_cross_entropy_forward_onehot", args, [0, 1], ulps=1)
    args = [_nan((4, 6)), dloss, prob, onehot]
    half_twins("softmax_cross_entropy_backward_onehot", args, [0], ulps=1)
    t = _randn(rng, (4, 6))
    _, err = half_twins("mse_forward", [_nan(1), _nan((4, 6)), logits, t], [0, 1], ulps=1)
    half_twins("mse_backward", [_nan((4, 6)), np.array([2.0], F16), err], [0])


def test_optimisers(rng):
    param, grad, buf = (_randn(rng, 257) for _ in range(3))
    state = np.abs(_randn(rng, 257))
    steps = np.array([3], np.int32)
    # steps as the optimizer passes them (a real GPU cannot take None for an array argument)
    args = [param, grad, buf, 0.1, 0.9, 0.0, 1e-3, True, steps]
    half_twins("sgd_update", args, [0, 1, 2], ulps=1)
    args = [param, grad, buf, state, steps, 1e-2, 0.9, 0.999, 1e-4, 1e-4]
    half_twins("adam_update", args, [0, 2, 3], ulps=1)
    args = [param, grad, state, steps, 1e-2, 0.9, 1e-4, 1e-3]
    half_twins("rmsprop_update", args, [0, 2], ulps=1)
    half_twins("adagrad_update", [param, grad, state, steps, 1e-2, 1e-4, 1e-3], [0, 2], ulps=1)


# ---------------------------------------------------------------- a model on the CUDA device
def _train(dev, steps=3):
    """A few SGD steps of a small MLP on float16 tensors (the simulator runs every thread in
    Python: a CNN on 28 x 28 images takes minutes there)."""
    dev.SetRandSeed(0)
    m = create_model("mlp", hidden=(8, 8))
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx = tensor.Tensor((2, 1, 4, 4), dev, F16)
    ty = tensor.Tensor((2,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=False)
    rng = np.random.default_rng(0)
    x, y = rng.random((2, 1, 4, 4)).astype(F16), np.array([3, 7], np.int32)
    losses = []
    for _ in range(steps):
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        _, loss = m(tx, ty)
        losses.append(float(tensor.to_numpy(loss)[0]))
    return losses, m


def test_a_float16_model_trains_on_the_cuda_device_as_on_the_cpu():
    want, _ = _train(device.create_cpu_device("64MiB"))
    got, m = _train(device.create_cuda_gpu("64MiB"))
    np.testing.assert_allclose(got, want, rtol=5e-3)  # float16 roundings, sums in other orders
    assert got[-1] < got[0]
    assert all(p.dtype == F16 for p in m.get_params().values())
