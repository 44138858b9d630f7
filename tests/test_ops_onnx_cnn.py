"""What ONNX's CNN models ask of the window operators: Conv with dilations and asymmetric pads,
MaxPool and AveragePool with asymmetric pads, ceil_mode and count_include_pad, and LRN with
ONNX's bias and window. Forward against onnx.reference.ReferenceEvaluator on one-node models,
backward against finite differences (tests/gradcheck.py: float64, every element, random
cotangent), and the CUDA device against the CPU (a GPU, or NUMBA_ENABLE_CUDASIM=1 in a pytest
process of its own; skipped otherwise). Tiny shapes: the whole file takes seconds."""

import numpy as np
import pytest
from gradcheck import check_gradients, forward_and_backward

from nnmem import autograd, device, tensor
from nnmem.kernels import sizes
from nnmem.ops.conv import Conv2d

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

rng = np.random.default_rng(26)


def randn(*shape):
    return rng.standard_normal(shape)


def onnx_reference(op_type, inputs, **attributes):
    """The output of a one-node ONNX model (opset 19) of `op_type` on `inputs` (name -> float64
    array), as onnx's reference evaluator computes it."""
    node = helper.make_node(op_type, list(inputs), ["y"], **attributes)
    declared = [
        helper.make_tensor_value_info(name, TensorProto.DOUBLE, a.shape)
        for name, a in inputs.items()
    ]
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)
    graph = helper.make_graph([node], op_type, declared, [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, inputs)[0]


def on_cpu(*arrays):
    dev = device.create_cpu_device("16MiB")
    return [tensor.from_numpy(a, dev) for a in arrays]


# ---------------------------------------------------------------- the cases, in ONNX's terms
# (x shape, W shape, group, strides, dilations, pads [top, left, bottom, right], bias)
CONVS = {
    "dilated_asymmetric_grouped": ((2, 4, 7, 6), (6, 2, 3, 2), 2, (2, 1), (2, 3), (1, 0, 2, 1), 1),
    "dilated_columns_padded_wide": ((1, 3, 5, 5), (2, 3, 3, 3), 1, (1, 1), (1, 2), (0, 2, 1, 2), 0),
    "asymmetric_only": ((2, 2, 5, 4), (3, 2, 2, 3), 1, (1, 2), (1, 1), (0, 1, 1, 0), 1),
    "symmetric_as_four": ((1, 2, 5, 5), (2, 2, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), 1),
}
# (kernel, strides, pads, ceil_mode): every ceil_mode case clips a last window that runs past
# the padding (the reference pads by at most one more: more would shift its windows)
POOLS = {
    "ceil_clipped": ((3, 3), (2, 2), (0, 0, 0, 0), 1),
    "asymmetric": ((3, 2), (2, 2), (2, 1, 1, 0), 0),
    "asymmetric_ceil": ((3, 3), (2, 2), (1, 0, 0, 1), 1),
    "symmetric": ((3, 3), (2, 1), (1, 1, 1, 1), 0),
}
POOL_INPUT = (2, 2, 6, 6)


def conv(case):
    """(fn of (x, W[, b]) tensors, ONNX attributes, input shapes) of a CONVS case."""
    _, w_shape, group, strides, dilations, pads, bias = CONVS[case]

    def fn(x, W, b=None):
        return autograd.conv2d(x, W, b, strides, pads, group=group, dilation=dilations)

    attributes = dict(group=group, strides=strides, dilations=dilations, pads=pads)
    shapes = [CONVS[case][0], w_shape] + [(w_shape[0],)] * bias
    return fn, attributes, shapes


def pool(case, is_max, count_include_pad=True):
    """(fn of x, the ONNX op and its attributes) of a POOLS case."""
    kernel, strides, pads, ceil_mode = POOLS[case]

    def fn(x):
        return autograd.pooling_2d(x, kernel, strides, pads, is_max, ceil_mode, count_include_pad)

    attributes = dict(kernel_shape=kernel, strides=strides, pads=pads, ceil_mode=ceil_mode)
    if not is_max:
        attributes["count_include_pad"] = int(count_include_pad)
    return fn, "MaxPool" if is_max else "AveragePool", attributes


# ---------------------------------------------------------------- forward against ONNX
@pytest.mark.parametrize("case", sorted(CONVS))
def test_conv_equals_onnx(case):
    fn, attributes, shapes = conv(case)
    arrays = [randn(*s) for s in shapes]
    want = onnx_reference("Conv", dict(zip("xWb", arrays)), **attributes)
    got = tensor.to_numpy(fn(*on_cpu(*arrays)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", sorted(POOLS))
@pytest.mark.parametrize("is_max, count_include_pad", [(True, True), (False, True), (False, False)])
def test_pooling_equals_onnx(case, is_max, count_include_pad):
    fn, op_type, attributes = pool(case, is_max, count_include_pad)
    x = randn(*POOL_INPUT)
    want = onnx_reference(op_type, {"x": x}, **attributes)
    got = tensor.to_numpy(fn(*on_cpu(x)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_max_pooling_never_picks_padding():
    """All inputs negative: a padded zero would win any window it were in."""
    x = -1.0 - np.abs(randn(*POOL_INPUT))
    for case in POOLS:
        y = tensor.to_numpy(pool(case, True)[0](*on_cpu(x)))
        assert (y < 0).all(), case


def test_average_pooling_counts_the_padding_by_default():
    """SINGA's and cuDNN's convention stays the default: a corner window of a 3x3 pool padded
    by 1 sums 4 ones and divides by 9 (ONNX's default, count_include_pad=0, by 4)."""
    (x,) = on_cpu(np.ones((1, 1, 4, 4)))
    assert tensor.to_numpy(autograd.pooling_2d(x, 3, 1, 1, False))[0, 0, 0, 0] == 4 / 9
    y = autograd.pooling_2d(x, 3, 1, 1, False, count_include_pad=False)
    assert tensor.to_numpy(y)[0, 0, 0, 0] == 1.0


@pytest.mark.parametrize("size", [3, 4, 5])
def test_lrn_equals_onnx(size):
    """ONNX's LRN is lrn with k = its bias and before = (size-1)//2 (the default, size//2, is
    the same for odd sizes). N == C: onnx 1.23's reference loops over axis 0 for the channels."""
    x = randn(5, 5, 2, 3)
    attributes = dict(size=size, alpha=0.5, beta=0.75, bias=2.0)
    want = onnx_reference("LRN", {"x": x}, **attributes)
    (xt,) = on_cpu(x)
    got = tensor.to_numpy(autograd.lrn(xt, size, 0.5, 0.75, 2.0, before=(size - 1) // 2))
    # ONNX's float attributes are float32, and the reference divides alpha by size in float32
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)
    default = tensor.to_numpy(autograd.lrn(xt, size, 0.5, 0.75, 2.0))
    assert np.array_equal(default, got) == (size % 2 == 1)


# ---------------------------------------------------------------- backward: finite differences
@pytest.mark.parametrize("case", ["dilated_asymmetric_grouped", "dilated_columns_padded_wide"])
def test_conv_gradients(case):
    fn, _, shapes = conv(case)
    check_gradients(fn, *[randn(*s) for s in shapes], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", sorted(POOLS))
@pytest.mark.parametrize("is_max, count_include_pad", [(True, True), (False, True), (False, False)])
def test_pooling_gradients(case, is_max, count_include_pad):
    fn, _, _ = pool(case, is_max, count_include_pad)
    # distinct values at least 0.01 apart: no finite step moves a window's maximum
    x = rng.permutation(np.prod(POOL_INPUT)).reshape(POOL_INPUT) * 0.01
    check_gradients(fn, x, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_gradients_with_onnx_window(size):
    check_gradients(
        lambda x: autograd.lrn(x, size, 0.5, 0.75, 2.0, before=(size - 1) // 2),
        randn(2, 5, 2, 2),
        rtol=1e-5,
        atol=1e-7,
    )


# ---------------------------------------------------------------- algorithms, sizes, bad input
def test_dilation_and_asymmetric_padding_run_direct():
    assert Conv2d((1, 1), (1, 1, 1, 1)).algorithm == "auto"  # the same padding on both sides
    assert Conv2d((1, 1), (1, 1, 1, 1)).padding == (1, 1)
    assert Conv2d((1, 1), (0, 1, 1, 0)).algorithm == "direct"
    assert Conv2d((1, 1), (1, 1), dilation=(2, 1)).algorithm == "direct"
    for algorithm in ("gemm", "conv3x3"):
        with pytest.raises(ValueError, match="is for dilation"):
            Conv2d((1, 1), (1, 1), algorithm, dilation=(1, 2))
        with pytest.raises(ValueError, match="is for dilation"):
            Conv2d((1, 1), (1, 1, 0, 0), algorithm)


def test_bad_arguments_say_what_to_give():
    with pytest.raises(ValueError, match="padding"):
        Conv2d((1, 1), (1, 1, 1))
    with pytest.raises(ValueError, match="dilation"):
        Conv2d((1, 1), (0, 0), dilation=(0, 1))
    (x,) = on_cpu(randn(1, 1, 4, 4))
    with pytest.raises(ValueError, match="smaller than the kernel"):
        autograd.pooling_2d(x, 2, 1, (0, 0, 2, 0))
    with pytest.raises(ValueError, match="before"):
        autograd.lrn(x, 3, before=3)


def test_sizes_follow_onnx():
    # ONNX: floor((size + pads - dilation*(k-1) - 1) / stride) + 1
    assert sizes.conv2d_output_shape(1, 1, 7, 6, 1, 3, 2, 2, 1, 1, 0, 2, 3, 2, 1) == (1, 1, 3, 4)
    # ceil_mode: 6 + 0 - 3 = 3 rows of span, ceil(3/2) + 1 = 3 windows (the last one clipped)
    assert sizes.pool2d_output_shape(1, 1, 6, 6, 3, 3, 2, 2, 0, 0, 0, 0, True) == (1, 1, 3, 3)
    assert sizes.pool2d_output_shape(1, 1, 6, 6, 3, 3, 2, 2, 0, 0, 0, 0, False) == (1, 1, 2, 2)
    # a last window that would start past the input and its padding before is dropped
    assert sizes.window_output_size(5, 2, 2, 1, 1, ceil_mode=True) == 3


# ---------------------------------------------------------------- the CUDA device
CUDA_CASES = {
    **{f"conv_{case}": conv(case)[::2] for case in CONVS if case != "symmetric_as_four"},
    **{f"maxpool_{case}": (pool(case, True)[0], [POOL_INPUT]) for case in POOLS},
    **{f"avgpool_{case}": (pool(case, False)[0], [POOL_INPUT]) for case in POOLS},
    **{f"avgpool_exclude_{case}": (pool(case, False, False)[0], [POOL_INPUT]) for case in POOLS},
    "lrn_onnx_window": (lambda x: autograd.lrn(x, 4, 0.5, 0.75, 2.0, before=1), [(2, 5, 2, 3)]),
}


@pytest.mark.parametrize("case", sorted(CUDA_CASES))
def test_cuda_gives_the_cpu_numbers(device_kind, case):
    if device_kind == "cpu":
        pytest.skip("compares the CUDA device with the CPU")
    fn, shapes = CUDA_CASES[case]
    arrays = [randn(*s) for s in shapes]
    out_shape = fn(*on_cpu(*arrays)).shape
    cotangent = randn(*out_shape)
    want = forward_and_backward(device.create_cpu_device("16MiB"), fn, arrays, cotangent)
    got = forward_and_backward(device.create_cuda_gpu("16MiB"), fn, arrays, cotangent)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
