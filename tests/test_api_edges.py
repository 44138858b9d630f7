"""Edge cases of the SINGA-style API a review found mishandled: IEEE division in the kernels,
axes out of range, hyperparameters no update can use, NumPy arrays on the left of an operator,
an empty batch in BatchNorm; and the device's arena, fit policy and NNMEM_POOL_BYTES."""

import gc

import numpy as np
import pytest

from nnmem import autograd, device, layer, opt, tensor
from nnmem.models import create_model


def F(values, dtype=np.float32):
    return tensor.from_numpy(np.asarray(values, dtype))


@pytest.fixture
def training():
    previous, autograd.training = autograd.training, True
    yield
    autograd.training = previous


def test_division_by_zero_gives_inf_and_nan_as_ieee_says(training):
    """The kernels raised ZeroDivisionError (SystemError from a parallel one)."""
    np.testing.assert_array_equal(tensor.to_numpy(F([1.0, 0.0]) / F([0.0, 0.0])), [np.inf, np.nan])
    x = F([0.0, 1.0])
    x.requires_grad = x.stores_grad = True
    ((_, grad),) = autograd.backward(autograd.reduce_sum(autograd.log(x)))
    np.testing.assert_array_equal(tensor.to_numpy(grad), [np.inf, 1.0])


def test_an_update_that_divides_by_zero_is_applied_whole(training):
    """AdaGrad with epsilon 0 and a zero gradient: 0 / 0 in the update. It raised half-way
    through the commit (one parameter updated, the other not, the step not counted)."""
    o = opt.AdaGrad(lr=0.1, epsilon=0.0)
    w1 = tensor.Tensor((2,), requires_grad=True, stores_grad=True, name="w1").set_value(1.0)
    w2 = tensor.Tensor((2,), requires_grad=True, stores_grad=True, name="w2").set_value(1.0)
    loss = autograd.add(autograd.mul(w1, F([0.0, 0.0])), autograd.mul(w2, F([1.0, 2.0])))
    o(autograd.reduce_sum(loss))
    assert o.get_states()["step_counter"] == 1
    np.testing.assert_allclose(tensor.to_numpy(w2), [0.9, 0.9])
    assert np.isnan(tensor.to_numpy(w1)).all()  # 0 / sqrt(0): as NumPy computes it


A = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a: autograd.cat([a, a], 2), "concat: axis 2 is out of range"),
        (lambda a: a.transpose((0, -3)), "not a permutation"),
        (lambda a: autograd.squeeze(autograd.reshape(a, (1, 6)), 2), "squeeze: axis 2"),
        (lambda a: autograd.unsqueeze(a, 7), "unsqueeze: axis 7"),
        (lambda a: autograd.split(a, 3, [1, 2]), "split: axis 3"),
        (lambda a: autograd.split(a, 1, [4, -1]), "do not add up"),
        (lambda a: autograd.slice(a, [0], [1], [2]), "slice: axis 2"),
        (lambda a: tensor.repeat(a, 2, 5), "repeat: axis 5"),
        (lambda a: autograd.gather(a, 1, [5]), "gather: index 5 is out of range"),
    ],
    ids=["cat", "transpose", "squeeze", "unsqueeze", "split", "split-parts", "slice", "repeat",
         "gather"],
)  # fmt: skip
def test_an_axis_or_index_out_of_range_is_refused(call, message):
    """`% ndim` took another axis (cat along 2 joined along 0), `% size` another index."""
    with pytest.raises((ValueError, IndexError), match=message):
        call(F(A))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: opt.SGD(lr=float("nan")), "lr must be a finite number"),
        (lambda: opt.SGD(lr=0.1, momentum=float("inf")), "momentum must be a finite number"),
        (lambda: opt.SGD(lr=opt.ExponentialDecay(float("inf"), 10, 0.5)), "finite"),
        (lambda: opt.Adam(beta_1=1.0), r"beta_1 must be in \[0, 1\)"),
        (lambda: opt.Adam(beta_2=-0.5), r"beta_2 must be in \[0, 1\)"),
        (lambda: opt.RMSProp(rho=2.0), r"rho must be in \[0, 1\)"),
        (lambda: opt.RMSProp(epsilon=-10.0), "epsilon must be 0 or more"),
    ],
)
def test_a_hyperparameter_no_update_can_use_is_refused(make, message):
    """They turned every parameter into NaN at the first step (Adam's beta 1: 1 - 1**t = 0)."""
    with pytest.raises(ValueError, match=message):
        make()


def test_an_ndarray_on_the_left_of_a_tensor_is_refused_as_on_the_right():
    """NumPy added the tensor to each element: an object array of tensors."""
    with pytest.raises(TypeError, match="add: a tensor and a ndarray"):
        np.ones((2, 3), np.float32) + F(A)


def test_batchnorm_refuses_an_empty_batch_and_keeps_its_statistics(training):
    bn = layer.BatchNorm2d(3)
    bn(F(np.ones((1, 3, 2, 2))))
    before = [tensor.to_numpy(t) for t in (bn.running_mean, bn.running_var)]
    with pytest.raises(ValueError, match="empty batch"):
        bn(F(np.ones((0, 3, 2, 2))))
    for t, b in zip((bn.running_mean, bn.running_var), before):
        np.testing.assert_array_equal(tensor.to_numpy(t), b)


def test_a_collected_models_arena_comes_back_at_the_next_step():
    """The garbage collector frees the arena when no compiled step is left, but may run in the
    middle of a step: with one left, the arena shrinks when the next step begins."""
    dev = device.create_cpu_device("8MiB")

    def trained(batch):
        m = create_model("mlp", hidden=(256,), num_classes=10)
        m.set_optimizer(opt.SGD(lr=0.01))
        tx, ty = tensor.Tensor((batch, 20), dev), tensor.Tensor((batch,), dev, tensor.int32)
        m.compile([tx], is_train=True, use_graph=True)
        tx.copy_from_numpy(np.ones((batch, 20), np.float32))
        ty.copy_from_numpy(np.zeros(batch, np.int32))
        m(tx, ty)
        return m, tx, ty

    small = trained(4)
    alone = dev.graph_arena.size
    big = trained(2048)
    assert dev.graph_arena.size > alone
    del big
    gc.collect()
    small[0](*small[1:])  # the next step
    assert dev.graph_arena.size == alone


def test_create_cpu_device_refuses_an_empty_policy():
    with pytest.raises(ValueError, match="policy"):
        device.create_cpu_device(policy="")


def test_nnmem_pool_bytes_is_named_when_it_is_not_a_size(monkeypatch):
    monkeypatch.setenv("NNMEM_POOL_BYTES", "lots")
    with pytest.raises(ValueError, match="the environment variable NNMEM_POOL_BYTES: cannot"):
        device.default_pool_bytes()
    monkeypatch.setenv("NNMEM_POOL_BYTES", "")  # empty: unset, as NNMEM_CUDA_FALLBACK
    assert device.default_pool_bytes() == 2 * 2**30


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t: autograd.mse_loss(t, t), "predictions must be a float tensor"),
        (
            lambda t: autograd.softmax_cross_entropy(autograd.reshape(t, (1, 2)), F([0], np.int32)),
            "logits must be a float tensor",
        ),
    ],
    ids=["mse", "cross-entropy"],
)
def test_an_int32_tensor_is_not_truncated_silently(call, message):
    """int32 losses truncated; they are refused. (int32 with a number is float32, as SINGA's:
    [1, 3] / 2 is [0.5, 1.5]; int32 with int32 stays int32.)"""
    with pytest.raises(TypeError, match=message):
        call(F([1, 3], np.int32))
    np.testing.assert_array_equal(tensor.to_numpy(F([1, 3], np.int32) * 2), [2.0, 6.0])
    np.testing.assert_array_equal(tensor.to_numpy(F([1, 3], np.int32) / 2), [0.5, 1.5])


def test_average_over_an_axis_drops_it():
    """As SINGA's Average and np.mean: (2, 3) over axis 0 is (3,), not (1, 3)."""
    mean = tensor.average(F(A), 0)
    assert mean.shape == (3,)
    np.testing.assert_allclose(tensor.to_numpy(mean), A.mean(axis=0))
