"""SINGA's operator-level contract on nnmem's composites (nnmem/ops/composite.py), losses, Split
and the operators whose gradient is zero: ``y.creator.backward(dy)`` returns the gradient of
every input, the same as autograd.backward's, which is checked against finite differences
(tests/gradcheck.py: float64, every element, random cotangent). A composite holds what its
parts save, no more, and frees it in its backward."""

import numpy as np
import pytest
from gradcheck import check_gradients, forward_and_backward

from nnmem import autograd, device, operation, tensor
from nnmem.memory.units import aligned_size
from nnmem.ops.composite import Composite, CosSim, Where

rng = np.random.default_rng(3)


def randn(*shape):
    return rng.standard_normal(shape)


def probabilities(*shape):
    return rng.uniform(0.1, 0.9, shape)


@pytest.fixture
def training():
    autograd.training = True
    yield
    autograd.training = False


class Nested(Composite):
    """A composite of composites: mean(where(x, y, condition), x)."""

    def compose(self, x, y):
        return autograd.mean(autograd.where(x, y, [1, 0, 1]), x)


TARGET, LABELS = probabilities(2, 3), np.array([2, 0], np.int32)


def constant(a, like):
    return tensor.from_numpy(a, like.device)


# name -> (fn of the input tensors, the inputs, kind: 1 a loss (backward() takes dy = 1), 0 not,
# None: autograd.backward only, y's creator is another operator)
CASES = {
    "where": (lambda x, y: autograd.where(x, y, [[1, 0, 1]]), [randn(2, 3), randn(1, 3)], 0),
    "mean": (autograd.mean, [randn(2, 3), randn(3)], 0),
    "mean_of_x_and_x": (lambda x: autograd.mean(x, x), [randn(2, 3)], 0),
    "sum": (autograd.sum, [randn(2, 3), randn(3), randn(2, 1)], 0),
    "max": (autograd.max, [randn(4), randn(4), randn(2, 4)], 0),
    "min": (autograd.min, [randn(4), randn(2, 4), randn(4)], 0),
    "max_of_one": (autograd.max, [randn(4)], 0),
    "prelu": (autograd.prelu, [randn(2, 1, 3), randn(4, 1)], 0),
    "cossim": (autograd.cossim, [randn(3, 4), randn(3, 4)], 0),
    "gemm": (
        lambda a, b, c: autograd.gemm(a, b, c, 0.5, 2.0, 1, 0),
        [randn(3, 2), randn(3, 4), randn(4)],
        0,
    ),  # fmt: skip
    "gemm_alpha": (
        lambda a, b: autograd.gemm(a, b, None, 0.5, 1.0, 0, 1),
        [randn(2, 3), randn(4, 3)],
        0,
    ),  # fmt: skip
    "depth_to_space_dcr": (lambda x: autograd.depth_to_space(x, 2), [randn(1, 8, 2, 3)], 0),
    "depth_to_space_crd": (lambda x: autograd.depth_to_space(x, 2, "CRD"), [randn(1, 8, 1, 2)], 0),
    "space_to_depth_dcr": (lambda x: autograd.space_to_depth(x, 2), [randn(1, 2, 2, 4)], 0),
    "space_to_depth_crd": (lambda x: autograd.space_to_depth(x, 2, "CRD"), [randn(1, 2, 4, 2)], 0),
    "upsample": (lambda x: autograd.upsample(x, "nearest", [1, 2, 3]), [randn(2, 2, 2)], 0),
    "gather": (lambda x: autograd.gather(x, 1, [0, -1, 0]), [randn(2, 3, 2)], 0),
    "gather_nested": (lambda x: autograd.gather(x, 2, [[0, 1], [1, 1]]), [randn(2, 1, 3)], 0),
    "gather_ids": (
        lambda x: autograd.gather(x, 0, constant(np.array([2, 0, 2], np.int32), x)),
        [randn(3, 2, 2)],
        0,
    ),  # fmt: skip
    "tile": (lambda x: autograd.tile(x, 2), [randn(2, 3)], 0),
    "tile_list": (lambda x: autograd.tile(x, [2, 1, 2]), [randn(2, 3)], 0),
    "split_swapped": (
        lambda x: autograd.cat(autograd.split(x, 0, [1, 3])[::-1], 0),
        [randn(4, 2)],
        None,
    ),  # fmt: skip
    "nested": (lambda x, y: Nested()(x, y), [randn(2, 3), randn(3)], 0),
    "mse": (lambda x: autograd.mse_loss(x, constant(TARGET, x)), [randn(2, 3)], 1),
    "cross_entropy": (
        lambda x: autograd.cross_entropy(x, constant(TARGET, x)),
        [probabilities(2, 3)],
        1,
    ),  # fmt: skip
    "binary_cross_entropy": (
        lambda x: autograd.binary_cross_entropy(x, constant(TARGET, x)),
        [probabilities(2, 3)],
        1,
    ),  # fmt: skip
    "ranking_loss": (lambda p, n: autograd.ranking_loss(p, n, 0.5), [randn(4), randn(4)], 1),
    "softmax_cross_entropy": (
        lambda x: autograd.softmax_cross_entropy(x, constant(LABELS, x)),
        [randn(2, 3)],
        1,
    ),  # fmt: skip
}


def creator_gradients(fn, arrays, cotangent, loss):
    """y.creator.backward(dy) (backward() for a loss) on plain tensors, as SINGA's tests call
    it: a gradient per input of y's creator."""
    dev = device.create_cpu_device("4MiB")
    y = fn(*[tensor.from_numpy(a, dev) for a in arrays])
    dxs = y.creator.backward() if loss else y.creator.backward(tensor.from_numpy(cotangent, dev))
    dxs = dxs if isinstance(dxs, tuple) else (dxs,)
    return [tensor.to_numpy(dx) * (cotangent if loss else 1.0) for dx in dxs]


@pytest.mark.parametrize("name", sorted(CASES))
def test_creator_backward_gives_every_input_its_gradient(training, name):
    fn, arrays, loss = CASES[name]
    analytic = check_gradients(fn, *arrays)  # autograd.backward against finite differences
    if loss is None:  # y's creator is not the operator under test
        return
    scratch = device.create_cpu_device("4MiB")
    shape = fn(*[tensor.from_numpy(a, scratch) for a in arrays]).shape
    cotangent = np.random.default_rng(1).standard_normal(shape)  # check_gradients' (seed 0)
    direct = creator_gradients(fn, arrays, cotangent, loss)
    if name == "mean_of_x_and_x":  # one tensor twice: its gradient is the two summed
        direct = [direct[0] + direct[1]]
    assert len(direct) == len(analytic), "one gradient per input"
    for got, want in zip(direct, analytic):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_split_gives_its_input_the_pieces_gradients_side_by_side(training):
    x = tensor.from_numpy(randn(2, 5))
    pieces = autograd.split(x, 1, [2, 3])
    assert all(p.creator is pieces[0].creator for p in pieces)
    dys = [randn(2, 2), randn(2, 3)]
    dx = pieces[0].creator.backward(*[tensor.from_numpy(d) for d in dys])
    np.testing.assert_array_equal(tensor.to_numpy(dx), np.concatenate(dys, 1))


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_undoes_depth_to_space(mode):
    """A wrong permutation of the axes still passes a gradient check: check the values."""
    x = np.arange(2 * 8 * 2 * 3, dtype=np.float64).reshape(2, 8, 2, 3)
    y = autograd.depth_to_space(tensor.from_numpy(x), 2, mode)
    assert y.shape == (2, 2, 4, 6)
    back = autograd.space_to_depth(y, 2, mode)
    np.testing.assert_array_equal(tensor.to_numpy(back), x)


@pytest.mark.parametrize("name", ["sign", "ceil", "floor", "round", "rounde"])
def test_a_zero_gradient_is_recorded_but_never_flows(training, name):
    dev = device.create_cpu_device("1MiB")
    w = tensor.from_numpy(np.array([-1.5, 0.2, 2.7]), dev)
    w.stores_grad = True
    y = getattr(autograd, name)(w)
    assert y.creator is not None and not y.requires_grad, "recorded; a constant to its readers"
    dx = y.creator.backward(tensor.from_numpy(np.ones(3), dev))
    np.testing.assert_array_equal(tensor.to_numpy(dx), np.zeros(3))
    with pytest.raises(ValueError, match="no gradient can flow"):
        list(autograd.backward(y))
    z = autograd.mul(y, w)  # w's gradient comes from the product alone: y sends none
    (param, grad), = autograd.backward(z, tensor.from_numpy(np.ones(3), dev))  # fmt: skip
    assert param is w
    np.testing.assert_array_equal(tensor.to_numpy(grad), tensor.to_numpy(y))


def test_shape_is_recorded_and_its_backward_is_singas(training):
    x = tensor.from_numpy(randn(3, 2))
    y = autograd.shape(x)
    assert tensor.to_numpy(y).tolist() == [3, 2] and not y.requires_grad
    assert y.creator.backward(tensor.from_numpy(np.ones((4, 5)))) == [4, 5], "dy's shape"


def test_mse_is_the_mean_over_every_element_and_drops_its_target(training):
    dev = device.create_cpu_device("1MiB")
    x_np, t_np = randn(3, 4), randn(3, 4)
    x, t = tensor.from_numpy(x_np, dev), tensor.from_numpy(t_np, dev)
    loss = autograd.mse_loss(x, t)
    np.testing.assert_allclose(tensor.to_numpy(loss), [np.mean((x_np - t_np) ** 2)], rtol=1e-12)
    before = dev.memory_stats()["allocated_bytes.current"]
    del t
    assert dev.memory_stats()["allocated_bytes.current"] < before, "the loss keeps no target"
    dx = loss.creator.backward()
    np.testing.assert_allclose(tensor.to_numpy(dx), 2 * (x_np - t_np) / 12, rtol=1e-12)


def run_and_measure(forward, backward):
    """Bytes held after forward(a, b) (a, b: (16, 8) parameters) and its peak, above a and b;
    the peak of backward(y, dy), above what was held before it; the bytes held after it."""
    dev = device.create_cpu_device("1MiB")
    a, b = tensor.from_numpy(randn(16, 8), dev), tensor.from_numpy(randn(16, 8), dev)
    a.stores_grad = b.stores_grad = True
    base = dev.memory_stats()["allocated_bytes.current"]
    y = forward(a, b)
    stats = dev.memory_stats()
    held, peak = stats["allocated_bytes.current"] - base, stats["allocated_bytes.peak"] - base
    dy = tensor.from_numpy(np.ones(y.shape), dev)
    dev.reset_peak_memory_stats()
    before = dev.memory_stats()["allocated_bytes.current"]
    gradients = backward(y, dy)
    backward_peak = dev.memory_stats()["allocated_bytes.peak"] - before
    del gradients
    after = dev.memory_stats()["allocated_bytes.current"] - before
    return held, peak, backward_peak, after + held, (y, dy)


def walk(y, dy):
    return dict(autograd.backward(y, dy))


@pytest.mark.parametrize(
    "composite, parts",
    [
        (CosSim(), CosSim().compose),
        (Where(condition=[1, 0] * 4), lambda a, b: Where().compose(a, b, condition=[1, 0] * 4)),
    ],
)
def test_a_composite_holds_what_its_parts_hold_and_frees_them_as_the_walk_does(
    training, composite, parts
):
    # the parts called one by one as plain operators, and autograd.backward's walk over them
    want = run_and_measure(parts, walk)[:4]
    *got, (y, dy) = run_and_measure(composite, lambda y, dy: y.creator.backward(dy))
    assert tuple(got) == want
    assert got[3] == aligned_size(y.memsize(), dy.device.pool.alignment), "y alone is left"
    with pytest.raises(RuntimeError, match="backward has run already"):
        y.creator.backward(dy)


def test_a_second_walk_over_a_released_composite_yields_nothing(training):
    """SINGA's GAN example runs autograd.backward twice on one loss."""
    x = tensor.from_numpy(probabilities(2, 3))
    x.stores_grad = True
    loss = autograd.binary_cross_entropy(x, tensor.from_numpy(TARGET))
    assert [p for p, _ in autograd.backward(loss)] == [x]
    assert list(autograd.backward(loss)) == []


def test_an_exporter_traces_the_parts_on_the_real_inputs(training):
    a, b = tensor.from_numpy(randn(2, 3)), tensor.from_numpy(randn(2, 3))
    with operation.tracing() as trace:
        y = autograd.cossim(a, b)
    assert [type(op).__name__ for op, _, _ in trace] == [
        "Mul", "Sum", "Mul", "Sum", "Pointwise", "Mul", "Sum", "Pointwise", "Mul", "Broadcast",
    ]  # fmt: skip
    assert trace[0][1] == (a, b) and trace[-1][2] == (y,)


def test_a_composite_inside_another_operator_is_part_of_it(training):
    seen = []

    class Outer(operation.Operator):
        def forward(self, x):
            inner = autograd.mean(x, x)
            seen.append(inner.creator)
            return inner

    y = Outer()(tensor.from_numpy(randn(3)))
    assert seen == [None] and isinstance(y.creator, Outer)


def test_a_composite_backward_takes_one_gradient_per_output(training):
    y = autograd.where(tensor.from_numpy(randn(2)), tensor.from_numpy(randn(2)), [1, 0])
    with pytest.raises(TypeError, match="takes 1 gradient"):
        y.creator.backward()


CUDA_CASES = ["where", "split_swapped", "mse"]  # the new uses of the kernels: Split, MSE's scale


@pytest.mark.parametrize("name", CUDA_CASES)
def test_cuda_gives_the_cpu_numbers(device_kind, name):
    if device_kind == "cpu":
        pytest.skip("compares the CUDA device with the CPU")
    fn, arrays, _ = CASES[name]
    scratch = device.create_cpu_device("1MiB")
    cotangent = randn(*fn(*[tensor.from_numpy(a, scratch) for a in arrays]).shape)
    want = forward_and_backward(device.create_cpu_device("4MiB"), fn, arrays, cotangent)
    got = forward_and_backward(device.create_cuda_gpu("4MiB"), fn, arrays, cotangent)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
