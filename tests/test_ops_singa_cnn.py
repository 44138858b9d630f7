"""What SINGA's operator tests brought to the window operators and beside them: the layers'
pad_mode (NOTSET, VALID, SAME_UPPER, SAME_LOWER: ONNX's auto_pad) and Conv2d's dilation,
ScatterElements, and pad's reflect and edge modes. Forward against
onnx.reference.ReferenceEvaluator (the pad modes) and NumPy (scatter, pad), backward against
finite differences (tests/gradcheck.py: float64, every element, random cotangent), graph mode
against eager, and the CUDA device against the CPU (a GPU, or NUMBA_ENABLE_CUDASIM=1 in a pytest
process of its own; skipped otherwise). Tiny shapes."""

import numpy as np
import pytest
from gradcheck import check_gradients, forward_and_backward
from test_ops_onnx_cnn import on_cpu, onnx_reference

from nnmem import autograd, device, layer, model, opt, tensor
from nnmem.ops.padding import auto_pads

rng = np.random.default_rng(29)


def randn(*shape):
    return rng.standard_normal(shape)


# ---------------------------------------------------------------- pad modes
def test_same_padding_puts_the_odd_element_where_onnx_does():
    # 5 positions, a 4-wide window, stride 1: 3 of padding, the odd one after (UPPER)
    assert auto_pads("SAME_UPPER", (5, 5), (4, 1), (1, 1)) == (1, 0, 2, 0)
    assert auto_pads("SAME_LOWER", (5, 5), (4, 1), (1, 1)) == (2, 0, 1, 0)
    # stride 2 on 7: ceil(7/2) = 4 outputs need (4-1)*2 + 3 - 7 = 2 (even: alike)
    assert auto_pads("SAME_LOWER", (7, 7), (3, 3), (2, 2)) == (1, 1, 1, 1)
    # dilation 2 makes a 3-tap filter 5 wide: 4 of padding at stride 1
    assert auto_pads("SAME_UPPER", (6, 6), (3, 3), (1, 1), (2, 1)) == (2, 1, 2, 1)
    assert auto_pads("VALID", (6, 6), (3, 3), (1, 1)) == (0, 0, 0, 0)
    with pytest.raises(ValueError, match="SAME_UPPER"):
        auto_pads("SAME", (6, 6), (3, 3), (1, 1))


# (pad_mode, kernel, stride, dilation) on a 7x6 input: odd and even totals, strides that do not
# divide the size
CONV_MODES = {
    "same_upper": ("SAME_UPPER", (4, 3), (1, 2), (1, 1)),
    "same_lower_dilated": ("SAME_LOWER", (2, 3), (2, 1), (2, 2)),
    "valid_strided": ("VALID", (3, 2), (2, 3), (1, 1)),
}
CONV_INPUT = (2, 2, 7, 6)


def conv_layer(case, bias=False):
    pad_mode, kernel, stride, dilation = CONV_MODES[case]
    return layer.Conv2d(
        3, kernel, stride=stride, dilation=dilation, pad_mode=pad_mode, bias=bias, padding=5
    )


@pytest.mark.parametrize("case", sorted(CONV_MODES))
def test_conv_layer_pad_modes_equal_onnx_auto_pad(case):
    pad_mode, kernel, stride, dilation = CONV_MODES[case]
    x = randn(*CONV_INPUT)
    (tx,) = on_cpu(x)
    conv = conv_layer(case, bias=True)  # padding=5 is not read: pad_mode decides (SINGA)
    conv(tx)  # creates W and b (b zero): give b values too
    W, b = tensor.to_numpy(conv.W), randn(3)
    conv.b.copy_from_numpy(b)
    y = tensor.to_numpy(conv(tx))
    attributes = dict(auto_pad=pad_mode, kernel_shape=kernel, strides=stride, dilations=dilation)
    want = onnx_reference("Conv", {"x": x, "W": W, "b": b}, **attributes)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    if pad_mode.startswith("SAME"):
        assert y.shape[2:] == tuple(-(-n // s) for n, s in zip(CONV_INPUT[2:], stride))


@pytest.mark.parametrize("case", sorted(CONV_MODES))
def test_conv_layer_pad_modes_gradient(case):
    check_gradients(conv_layer(case), randn(*CONV_INPUT), rtol=1e-5, atol=1e-7)


# (pad_mode, kernel, stride, ONNX's pads by its rule: total (out - 1) s + k - n, out = ceil(n/s))
# on a 5x6 input. The pads are given: onnx's ReferenceEvaluator (1.23) makes 2 rows of MaxPool's
# SAME_LOWER below, where onnxruntime and the rule make ceil(5/2) = 3.
POOL_MODES = {
    "same_upper": ("SAME_UPPER", (4, 3), (1, 2), (1, 0, 2, 1)),  # totals 3 and 1: odd after
    "same_lower": ("SAME_LOWER", (2, 3), (2, 1), (1, 1, 0, 1)),  # totals 1 and 2: odd before
    "valid": ("VALID", (3, 2), (2, 2), (0, 0, 0, 0)),
}
POOL_INPUT = (2, 2, 5, 6)


def pool_layer(case, is_max):
    pad_mode, kernel, stride, _ = POOL_MODES[case]
    kind = layer.MaxPool2d if is_max else layer.AvgPool2d
    return kind(kernel, stride, 1, pad_mode)  # SINGA's positional order; padding not read


@pytest.mark.parametrize("case", sorted(POOL_MODES))
@pytest.mark.parametrize("is_max", [True, False])
def test_pooling_layer_pad_modes_equal_onnx_pads(case, is_max):
    _, kernel, stride, pads = POOL_MODES[case]
    x = randn(*POOL_INPUT)
    y = tensor.to_numpy(pool_layer(case, is_max)(*on_cpu(x)))
    attributes = dict(pads=pads, kernel_shape=kernel, strides=stride)
    if not is_max:  # SINGA's and cuDNN's average counts the padding
        attributes["count_include_pad"] = 1
    want = onnx_reference("MaxPool" if is_max else "AveragePool", {"x": x}, **attributes)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", sorted(POOL_MODES))
@pytest.mark.parametrize("is_max", [True, False])
def test_pooling_layer_pad_modes_gradient(case, is_max):
    # distinct values at least 0.01 apart: no finite step moves a window's maximum
    x = rng.permutation(np.prod(POOL_INPUT)).reshape(POOL_INPUT) * 0.01
    check_gradients(pool_layer(case, is_max), x, rtol=1e-5, atol=1e-7)


def test_pooling_1d_same_keeps_the_length():
    x = randn(2, 3, 7)
    y = tensor.to_numpy(layer.MaxPool1d(4, 1, pad_mode="SAME_LOWER")(*on_cpu(x)))
    padded = np.pad(x, ((0, 0), (0, 0), (2, 1)), constant_values=-np.inf)  # 3: 2 before
    want = np.stack([padded[..., i : i + 4].max(-1) for i in range(7)], -1)
    np.testing.assert_array_equal(y, want)


def test_bad_pad_mode_says_what_to_give():
    for make in (layer.Conv2d, layer.MaxPool2d, layer.AvgPool1d):
        with pytest.raises(ValueError, match="use one of NOTSET, VALID, SAME_UPPER"):
            make(2, 2, pad_mode="SAME")


# ---------------------------------------------------------------- ScatterElements
# (data shape, indices, axis): indices with negative entries, shorter than the data on every
# axis, on the first, a middle and the last axis
SCATTERS = {
    "rows": ((3, 4), [[1, 0, 2], [-1, 2, 1]], 0),
    "middle_axis_3d": ((2, 4, 3), [[[3, 0], [-4, 2]], [[1, -1], [2, 0]]], 1),
    "last_axis": ((2, 5), [[1, -2]], -1),
}


def scatter(case):
    """(fn of x, indices, updates as float64 arrays) of a SCATTERS case."""
    shape, indices, axis = SCATTERS[case]
    indices = np.array(indices, np.int32)
    updates = randn(*indices.shape)

    def fn(x):
        return autograd.scatter_elements(x, indices, updates, axis)

    return fn, indices, updates


@pytest.mark.parametrize("case", sorted(SCATTERS))
def test_scatter_elements_equals_numpy(case):
    fn, indices, updates = scatter(case)
    shape, _, axis = SCATTERS[case]
    x = randn(*shape)
    want = x.copy()
    for i in np.ndindex(indices.shape):
        at = list(i)
        at[axis] = indices[i] % shape[axis]
        want[tuple(at)] = updates[i]
    np.testing.assert_array_equal(tensor.to_numpy(fn(*on_cpu(x))), want)


@pytest.mark.parametrize("case", sorted(SCATTERS))
def test_scatter_elements_gradient(case):
    fn, _, _ = scatter(case)
    grads = check_gradients(fn, randn(*SCATTERS[case][0]))
    replaced = np.asarray(SCATTERS[case][1]).size  # the cases' positions are distinct
    assert (grads[0] == 0).sum() == replaced  # every replaced element, and no other, gets none


def test_scatter_elements_keeps_the_indices_alone_and_returns_dx():
    """SINGA's contract: updates are a constant, creator.backward(dy) is dx; backward keeps the
    int32 indices, not x, y or the updates."""
    autograd.training = True
    dev = device.create_cpu_device("16MiB")
    x = tensor.from_numpy(np.zeros((2, 3), np.float32), dev)
    indices = tensor.from_numpy(np.array([[2, 0]], np.int32), dev)
    updates = tensor.from_numpy(np.array([[5.0, 6.0]], np.float32), dev)
    y = autograd.scatter_elements(x, indices, updates, axis=1)
    np.testing.assert_array_equal(tensor.to_numpy(y), [[6, 0, 5], [0, 0, 0]])
    (saved,) = y.creator.saved
    assert saved.block is indices.block and saved.dtype == np.int32
    dx = y.creator.backward(tensor.from_numpy(np.ones((2, 3), np.float32), dev))
    np.testing.assert_array_equal(tensor.to_numpy(dx), [[0, 1, 0], [1, 1, 1]])


def test_scatter_elements_bad_input_says_what_to_give():
    (x,) = on_cpu(randn(2, 3))
    with pytest.raises(IndexError, match="outside"):
        tensor.to_numpy(autograd.scatter_elements(x, [[3]], [[1.0]], axis=1))
    with pytest.raises(ValueError, match="indices of the data's rank"):
        autograd.scatter_elements(x, [1, 0], [1.0, 2.0])
    with pytest.raises(ValueError, match="one update per index"):
        autograd.scatter_elements(x, [[1, 0]], [[1.0]])
    with pytest.raises(ValueError, match="out of range"):
        autograd.scatter_elements(x, [[1]], [[1.0]], axis=2)
    with pytest.raises(TypeError, match="integers"):
        autograd.scatter_elements(x, [[0.5]], [[1.0]])


# ---------------------------------------------------------------- pad: reflect and edge
# (shape, ONNX's pads): pads past size - 1 (reflect mirrors again), a size-1 axis, axes unpadded
PADS = {
    "past_the_size": ((3, 2), [0, 2, 0, 3]),
    "three_axes": ((2, 3, 4), [1, 0, 2, 1, 2, 3]),
    "size_one_axis": ((1, 3), [2, 1, 1, 0]),
}


@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize("case", sorted(PADS))
def test_pad_equals_numpy(case, mode):
    shape, pads = PADS[case]
    x, n = randn(*shape), len(shape)
    want = np.pad(x, [(pads[i], pads[i + n]) for i in range(n)], mode=mode)
    np.testing.assert_array_equal(tensor.to_numpy(autograd.pad(*on_cpu(x), mode, pads)), want)


@pytest.mark.parametrize("mode", ["reflect", "edge"])
@pytest.mark.parametrize("case", sorted(PADS))
def test_pad_gradient(case, mode):
    shape, pads = PADS[case]
    check_gradients(lambda x: autograd.pad(x, mode, pads), randn(*shape))


def test_pad_bad_mode_says_what_to_give():
    (x,) = on_cpu(randn(2, 3))
    with pytest.raises(ValueError, match="use 'constant', 'reflect' or 'edge'"):
        autograd.pad(x, "wrap", [1, 1, 1, 1])


# ---------------------------------------------------------------- graph mode and the plan
class SamePadNet(model.Model):
    """conv (SAME_UPPER, stride 2) -> max pool (SAME_LOWER) -> scatter -> MSE."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(2, 3, stride=2, pad_mode="SAME_UPPER")
        self.pool = layer.MaxPool2d(2, 1, pad_mode="SAME_LOWER")
        self.loss = layer.MeanSquareError()

    def forward(self, x):
        y = self.pool(self.conv(x))
        return autograd.scatter_elements(y, np.zeros((1, 2, 1, 2), np.int32), np.ones((1, 2, 1, 2)))

    def train_one_batch(self, x, t):
        out = self.forward(x)
        loss = self.loss(out, t)
        self.optimizer(loss)
        return out, loss


def test_graph_mode_plans_and_replays_the_new_operators_as_eager_runs_them():
    x, t = randn(2, 1, 5, 5).astype(np.float32), randn(2, 2, 3, 3).astype(np.float32)

    def run(use_graph):
        dev = device.create_cpu_device("16MiB")
        dev.SetRandSeed(1)
        m = SamePadNet()
        m.set_optimizer(opt.SGD(lr=0.1))
        tx, tt = tensor.from_numpy(x, dev), tensor.from_numpy(t, dev)
        m.compile([tx], is_train=True, use_graph=use_graph)
        losses = [float(tensor.to_numpy(m(tx, tt)[1])[0]) for _ in range(3)]
        return losses, m, tx, tt

    eager, _, _, _ = run(False)
    graph, m, tx, tt = run(True)
    np.testing.assert_array_equal(graph, eager)
    assert graph[2] < graph[0]
    nodes = [(n.name, n.phase) for n in m.compiled_step(tx, tt).nodes]
    assert ("ScatterElements", "forward") in nodes and ("ScatterElements", "backward") in nodes


# ---------------------------------------------------------------- the CUDA device
CUDA_CASES = {
    **{f"scatter_{case}": (scatter(case)[0], [SCATTERS[case][0]]) for case in SCATTERS},
    **{
        f"pad_{mode}": (
            lambda x, mode=mode: autograd.pad(x, mode, PADS["three_axes"][1]),
            [(2, 3, 4)],
        )
        for mode in ("reflect", "edge")
    },
    # what Conv2d(pad_mode=SAME_LOWER, dilation=2) runs: its auto_pads, asymmetric
    "conv_same_lower_dilated": (
        lambda x, W: autograd.conv2d(
            x,
            W,
            None,
            (2, 1),
            auto_pads("SAME_LOWER", (7, 6), (2, 3), (2, 1), (2, 2)),
            "auto",
            1,
            (2, 2),
        ),
        [CONV_INPUT, (3, 2, 2, 3)],
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", sorted(CUDA_CASES))
def test_cuda_gives_the_cpu_numbers(device_kind, case):
    if device_kind == "cpu":
        pytest.skip("compares the CUDA device with the CPU")
    fn, shapes = CUDA_CASES[case]
    arrays = [randn(*s) for s in shapes]
    cotangent = randn(*fn(*on_cpu(*arrays)).shape)
    want = forward_and_backward(device.create_cpu_device("16MiB"), fn, arrays, cotangent)
    got = forward_and_backward(device.create_cuda_gpu("16MiB"), fn, arrays, cotangent)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
