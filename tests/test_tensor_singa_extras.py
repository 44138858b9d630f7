"""SINGA's tensor functions that its own tests call (tests/singa/test_tensor.py): einsum and
tensordot (nnmem/ops/contraction.py), copy_data_to_from, the dtype rules of arithmetic on int32
tensors and numbers, and as_type as a device cast (kernels/*/cast.py).

Values against NumPy; gradients against finite differences (tests/gradcheck.py); every device
operation recorded by graph mode and replayed; the tests that take `device` also run on the
CUDA device where a GPU or the simulator is present (NUMBA_ENABLE_CUDASIM=1, a pytest process
of its own), else they skip there."""

import numpy as np
import pytest
from gradcheck import check_gradients

from nnmem import autograd, tensor
from nnmem import device as device_module
from nnmem.graph.recorder import Recorder
from nnmem.memory.block import UnwrittenBlockError

rng = np.random.default_rng(29)


def randn(*shape):
    return rng.standard_normal(shape)


def on(dev, a):
    return tensor.from_numpy(np.asarray(a), dev)


def recorded(dev, fn):
    """fn() while `dev` records (nothing runs), then its recorded kernels run in order, each
    block allocated before its first writer (as a step's plan places it): the result and the
    recording's nodes."""
    recorder = Recorder()
    with dev.recording(recorder):
        result = fn()
    for node in recorder.nodes:
        for w in node.writes:
            w.block.ensure_allocated()
        node.fn(*[w.array() for w in node.writes], *[r.array() for r in node.reads])
    return result, recorder.nodes


# -- einsum and tensordot ------------------------------------------------------------------------
EINSUMS = {  # subscripts: the shapes of a and b
    "kij,kij->kij": ((2, 3, 2), (2, 3, 2)),  # elementwise (SINGA's test)
    "kij,kih->kjh": ((2, 3, 2), (2, 3, 4)),  # batched matmul (SINGA's test)
    "ij,jk->ik": ((2, 3), (3, 4)),
    "ij,jk": ((2, 3), (3, 4)),  # no '->': the letters seen once, sorted
    "i,j->ji": ((3,), (2,)),  # outer product, transposed
    "ij,ij->": ((2, 3), (2, 3)),  # a full contraction: a 0-d result
    "bij,bjk->bki": ((2, 2, 3), (2, 3, 2)),
    "ij,k->i": ((2, 3), (4,)),  # j and k each in one input alone, summed first
    "ijk,kj->i": ((2, 3, 4), (4, 3)),
}


@pytest.mark.parametrize("subscripts", sorted(EINSUMS))
def test_einsum_gives_numpys_values(device, subscripts):
    a, b = (randn(*s) for s in EINSUMS[subscripts])
    got = tensor.einsum(subscripts, on(device, a), on(device, b))
    want = np.einsum(subscripts, a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(tensor.to_numpy(got), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("subscripts", ["kij,kih->kjh", "i,j->ji", "ij,k->i", "ijk,kj->i"])
def test_einsum_gradients(subscripts):
    a, b = (randn(*s) for s in EINSUMS[subscripts])
    check_gradients(lambda x, y: tensor.einsum(subscripts, x, y), a, b)


def test_einsum_holds_the_output_not_every_product():
    """SINGA's einsum repeats both inputs and multiplies them into k*i*j*h elements before it
    sums; here no tensor the step writes is larger than an input or the output."""
    dev = device_module.create_cpu_device("1MiB")
    a, b = randn(2, 5, 3), randn(2, 5, 4)
    y, nodes = recorded(dev, lambda: tensor.einsum("kij,kih->kjh", on(dev, a), on(dev, b)))
    np.testing.assert_allclose(tensor.to_numpy(y), np.einsum("kij,kih->kjh", a, b), rtol=1e-12)
    written = [int(np.prod(w.shape)) for node in nodes for w in node.writes]
    assert max(written) == a.size < 2 * 5 * 3 * 4  # a transposed to (k, j, i) is the largest


@pytest.mark.parametrize(
    "axes, shapes",
    [
        (1, ((2, 3, 2), (2, 3, 2))),  # SINGA's test
        (([0, 1], [2, 1]), ((2, 3, 2), (2, 3, 2))),  # SINGA's test
        (0, ((2,), (3, 2))),  # an outer product
        (2, ((2, 3, 4), (3, 4, 5))),
        ((-1, 0), ((2, 3), (3, 2))),  # a pair of ints
    ],
)
def test_tensordot_gives_numpys_values(device, axes, shapes):
    a, b = (randn(*s) for s in shapes)
    got = tensor.tensordot(on(device, a), on(device, b), axes)
    np.testing.assert_allclose(tensor.to_numpy(got), np.tensordot(a, b, axes), rtol=1e-12)


def test_tensordot_full_contraction_is_1_by_1_as_singas():
    dev = device_module.create_cpu_device("1MiB")
    a, b = randn(2, 3), randn(3, 2)
    got = tensor.tensordot(on(dev, a), on(dev, b), ([0, 1], [1, 0]))
    assert got.shape == (1, 1)
    np.testing.assert_allclose(tensor.to_numpy(got)[0, 0], np.tensordot(a, b, ([0, 1], [1, 0])))


def test_tensordot_gradients():
    check_gradients(
        lambda x, y: tensor.tensordot(x, y, ([0, 2], [2, 0])), randn(2, 3, 2), randn(2, 4, 2)
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a, b: tensor.einsum("ij,jk->ik", a, b, a), "takes 2"),
        (lambda a, b: tensor.einsum("ij->ij", a, b), "two inputs"),
        (lambda a, b: tensor.einsum("i...,jk->ik", a, b), "'...' is not supported"),
        (lambda a, b: tensor.einsum("ii,jk->ik", a, b), "a diagonal"),
        (lambda a, b: tensor.einsum("ijk,jk->i", a, b), "has 2 axes"),
        (lambda a, b: tensor.einsum("ij,jk->iz", a, b), "in no input"),
        (lambda a, b: tensor.einsum("ij,ik->jk", a, b), "sizes 2 and 3"),
        (lambda a, b: tensor.tensordot(a, b, 3), "give 0 to 2"),
        (lambda a, b: tensor.tensordot(a, b, ([0], [0])), "equal sizes"),
        (lambda a, b: tensor.tensordot(a, b, ([1, 1], [0, 0])), "an axis twice"),
        (lambda a, b: tensor.tensordot(a, b, ([2], [0])), "which has 2"),
        (lambda a, b: tensor.tensordot(a, b, "ab"), "give an int or a pair"),
    ],
)
def test_contraction_errors_name_the_problem(call, message):
    dev = device_module.create_cpu_device("1MiB")
    with pytest.raises(ValueError, match=message):
        call(on(dev, randn(2, 3)), on(dev, randn(3, 4)))


# -- copy_data_to_from -----------------------------------------------------------------------------
def test_copy_data_to_from_copies_a_range_and_keeps_the_rest(device):
    dst, src = on(device, np.arange(6.0).reshape(2, 3)), on(device, -np.arange(1.0, 9.0))
    assert tensor.copy_data_to_from(dst, src, 3, dst_offset=2, src_offset=4) is dst
    np.testing.assert_array_equal(tensor.to_numpy(dst), [[0, 1, -5], [-6, -7, 5]])


def test_copy_data_to_from_fills_an_unwritten_tensor_only_whole():
    dev = device_module.create_cpu_device("1MiB")
    src = on(dev, np.arange(4, dtype=np.int32))
    whole = tensor.copy_data_to_from(tensor.Tensor((2, 2), dev, tensor.int32), src, 4)
    np.testing.assert_array_equal(tensor.to_numpy(whole), [[0, 1], [2, 3]])
    with pytest.raises(UnwrittenBlockError):  # the two elements it leaves were never written
        tensor.copy_data_to_from(tensor.Tensor((4,), dev, tensor.int32), src, 2)


def test_copy_data_to_from_is_recorded_and_replayed():
    dev = device_module.create_cpu_device("1MiB")
    dst, src = on(dev, np.zeros(4)), on(dev, np.ones(4))
    _, nodes = recorded(dev, lambda: tensor.copy_data_to_from(dst, src, 2, 1))
    assert len(nodes) == 1 and {id(r.block) for r in nodes[0].reads} == {
        id(src.block),
        id(dst.block),  # read too: the copy keeps dst's other elements
    }
    np.testing.assert_array_equal(tensor.to_numpy(dst), [0, 1, 1, 0])


def test_copy_data_to_from_another_device_comes_through_the_host():
    dst = on(device_module.create_cpu_device("1MiB"), np.zeros(3, np.float32))
    src = on(device_module.create_cpu_device("1MiB"), np.array([7, 8, 9], np.float32))
    tensor.copy_data_to_from(dst, src, 2, 0, 1)
    np.testing.assert_array_equal(tensor.to_numpy(dst), [8, 9, 0])


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((3, 2, 0), ValueError, "elements 2 to 5 of dst, which has 4"),
        ((2, 0, 3), ValueError, "elements 3 to 5 of src"),
        ((-1, 0, 0), ValueError, "size = -1"),
        ((1.5, 0, 0), ValueError, "size = 1.5"),
    ],
)
def test_copy_data_to_from_bad_ranges(args, error, message):
    dev = device_module.create_cpu_device("1MiB")
    dst, src = on(dev, np.zeros(4)), on(dev, np.ones(4))
    with pytest.raises(error, match=message):
        tensor.copy_data_to_from(dst, src, *args)


def test_copy_data_to_from_refuses_other_dtypes_and_overlaps():
    dev = device_module.create_cpu_device("1MiB")
    t = on(dev, np.arange(4.0))
    with pytest.raises(TypeError, match="float64 into int32"):
        tensor.copy_data_to_from(on(dev, np.zeros(4, np.int32)), t, 1)
    for dst_offset, src_offset in ((1, 0), (0, 1)):  # copy(): the same block
        with pytest.raises(ValueError, match="overlap"):
            tensor.copy_data_to_from(t.copy(), t, 2, dst_offset, src_offset)
    tensor.copy_data_to_from(t.copy(), t, 2, 2, 0)  # side by side: no overlap
    np.testing.assert_array_equal(tensor.to_numpy(t), [0, 1, 0, 1])


# -- SINGA's dtype rules, and as_type ------------------------------------------------------------
INTS = np.array([[-7, 4, 9], [3, -2, 5]], np.int32)


def test_int32_with_a_number_is_float32(device):
    x = on(device, INTS)
    for y, want in ((x + 0.5, INTS + 0.5), (2 - x, 2 - INTS), (x * 3, INTS * 3), (x / 2, INTS / 2)):
        assert y.dtype == tensor.float32
        np.testing.assert_array_equal(tensor.to_numpy(y), want.astype(np.float32))


def test_int32_with_int32_is_int32_truncated_toward_zero(device):
    a, b = on(device, INTS), on(device, np.array([2, -3, 4], np.int32))  # b broadcast
    for y, want in (
        (a - b, INTS - [2, -3, 4]),
        (a * b, INTS * [2, -3, 4]),
        (a / b, np.trunc(INTS / [2, -3, 4])),  # -7 / 2 is -3, as SINGA's C++ cast
        (tensor.gt(a, b), INTS > [2, -3, 4]),
    ):
        assert y.dtype == tensor.int32
        np.testing.assert_array_equal(tensor.to_numpy(y), want.astype(np.int32))


def test_int32_with_a_float_tensor_takes_its_dtype(device):
    mask, x = on(device, INTS), on(device, randn(2, 3))
    y = mask * x
    assert y.dtype == tensor.float64
    np.testing.assert_array_equal(tensor.to_numpy(y), INTS * tensor.to_numpy(x))


def test_a_number_is_compared_in_the_tensors_dtype():
    """float32(3.45) != 3.45 as doubles: SINGA's test asks t <= 3.45 of a t that holds
    float32(3.45), and expects 1, as SINGA rounds the number to the tensor's dtype."""
    dev = device_module.create_cpu_device("1MiB")
    t = on(dev, np.full(2, 3.45, np.float32))
    for y, want in ((t <= 3.45, 1), (t < 3.45, 0), (t == 3.45, 1), (t != 3.45, 0)):
        np.testing.assert_array_equal(tensor.to_numpy(y), [want, want])
    assert tensor.to_numpy(on(dev, np.full(1, 3.45)) == 3.45)[0] == 1  # float64 as well


def test_tensors_compare_by_identity_and_stay_dictionary_keys():
    dev = device_module.create_cpu_device("1MiB")
    t, u = on(dev, np.zeros(2)), on(dev, np.zeros(2))
    assert (t == t) is True and (t == u) is False and (t != u) is True and (t == None) is False  # noqa: E711
    assert {t: 1, u: 2}[u] == 2


def test_as_type_is_a_device_cast_outside_autograd(device):
    x = on(device, np.array([-1.7, -0.5, 0.5, 2.9]))
    autograd.training = True
    x.requires_grad = x.stores_grad = True
    as_int = x.as_type(tensor.int32)
    assert as_int.creator is None  # no gradient flows through a cast
    np.testing.assert_array_equal(tensor.to_numpy(as_int), [-1, 0, 0, 2])  # toward zero
    for dtype in (tensor.float32, tensor.float64, tensor.int32):
        back = as_int.as_type(dtype)
        assert back.dtype == dtype
        np.testing.assert_array_equal(tensor.to_numpy(back), [-1, 0, 0, 2])
    np.testing.assert_array_equal(
        tensor.to_numpy(x.as_type("float")), np.float32([-1.7, -0.5, 0.5, 2.9])
    )


def test_as_type_is_recorded_and_replayed():
    dev = device_module.create_cpu_device("1MiB")
    x = on(dev, np.array([1.5, -2.5], np.float32))
    y, nodes = recorded(dev, lambda: x.as_type(tensor.int32))
    assert [node.name for node in nodes] == ["Cast"]
    np.testing.assert_array_equal(tensor.to_numpy(y), [1, -2])


def test_an_unwritten_tensor_moves_to_another_device_unwritten():
    """SINGA's initializer tests move a new tensor to the device before filling it."""
    here, there = device_module.create_cpu_device("1MiB"), device_module.create_cpu_device("1MiB")
    t = tensor.Tensor((2, 3), here)
    t.to_device(there)
    assert t.device is there and not t.block.allocated
    with pytest.raises(UnwrittenBlockError):
        tensor.to_numpy(t)
    t.gaussian(0.0, 1.0)
    written = tensor.to_numpy(t)
    t.to_device(here)
    np.testing.assert_array_equal(tensor.to_numpy(t), written)
