"""SINGA's operator-level contract, and the saving nnmem keeps beside it.

SINGA: while training, an operation on a tensor that requires a gradient (every tensor does by
default, from_numpy's too) records its creator, and ``y.creator.backward(dy)`` returns the
gradient of every input. nnmem: ``autograd.backward`` still sends a gradient only where it
reaches a stored gradient, so an input batch gets none (conv1 runs no backward-data pass) and
an operation on such leaves alone is never visited; and the contract costs no memory.
"""

import numpy as np
import pytest

from nnmem import autograd, device, layer, opt, tensor
from nnmem.measure import measure_step
from nnmem.memory.timeline import Timeline
from nnmem.models import create_model


@pytest.fixture
def training():
    autograd.training = True
    yield
    autograd.training = False


def test_an_operation_on_a_plain_tensor_records_its_creator(training):
    dev = device.create_cpu_device("1MiB")
    x = tensor.from_numpy(np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32), dev)
    assert x.requires_grad and not x.stores_grad and x.creator is None
    y = autograd.relu(x)
    assert y.creator is not None and y.requires_grad
    dx = y.creator.backward(tensor.from_numpy(np.full((2, 2), 5.0, np.float32), dev).data)
    assert dx.shape() == (2, 2) == dx.shape  # SWIG's shape() and nnmem's tuple
    np.testing.assert_array_equal(tensor.to_numpy(dx), [[0, 5], [5, 0]])
    # ...and autograd.backward has nothing to send anywhere: no parameter is involved
    with pytest.raises(ValueError, match="none of which needs a gradient"):
        autograd.gradients(y)


def test_no_creator_without_training_or_without_requires_grad():
    dev = device.create_cpu_device("1MiB")
    x = tensor.from_numpy(np.ones((2, 2), np.float32), dev)
    assert autograd.relu(x).creator is None  # training is off
    autograd.training = True
    try:
        x.requires_grad = False
        assert autograd.relu(x).creator is None
    finally:
        autograd.training = False


def test_direct_backward_gives_every_input_the_walk_only_what_flows(training):
    """conv with an input batch: creator.backward gives dx, dW, db (SINGA's test_conv2d); the
    walk computes no dx: its backward writes only dW and db (and reads no W)."""
    dev = device.create_cpu_device("8MiB")
    conv = layer.Conv2d(2, 3, bias=True)
    x = tensor.from_numpy(np.random.default_rng(0).standard_normal((2, 1, 5, 5)), dev)
    x = x.as_type(tensor.float32)
    x.requires_grad = True
    y = conv(x)
    dy = tensor.from_numpy(np.ones(y.shape, np.float32), dev)
    op = y.creator
    assert op.needs_grad == (True, True, True) and op.grad_flows == (False, True, True)
    dx, dW, db = op.backward(dy.data)
    assert (dx.shape(), dW.shape(), db.shape()) == ((2, 1, 5, 5), (2, 1, 3, 3), (2,))
    y = conv(x)
    asked = []  # what the walk asks the conv's backward for
    original = type(y.creator).backward
    y.creator.backward = lambda *dys: (
        asked.append(y.creator.needs_grad) or original(y.creator, *dys)
    )
    grads = autograd.gradients(autograd.sum(y))
    assert asked == [(False, True, True)]
    assert set(grads) == {conv.W, conv.b}
    assert grads[id(conv.W)] is grads[conv.W]  # SINGA looks gradients up by id(parameter)


def test_the_walk_leaves_out_operations_on_leaves_alone(training):
    """A label branch (an operation on a tensor that stores no gradient) records a creator but
    the walk never runs its backward: its creator keeps what it saved, unused."""
    dev = device.create_cpu_device("1MiB")
    w = tensor.from_numpy(np.array([1.0, 2.0], np.float32), dev)
    w.stores_grad = True
    t = tensor.from_numpy(np.array([3.0, 4.0], np.float32), dev)
    scaled = autograd.mul(t, t)  # on leaves alone: recorded, not visited
    assert scaled.creator is not None and not scaled.creator.feeds_a_gradient
    loss = autograd.sum(autograd.mul(w, scaled))
    ran = []
    original = type(scaled.creator).backward
    scaled.creator.backward = lambda *dys: ran.append(dys) or original(scaled.creator, *dys)
    (grad,) = autograd.gradients(loss).values()
    np.testing.assert_array_equal(tensor.to_numpy(grad), [9.0, 16.0])
    assert ran == []


def test_the_contract_costs_no_memory():
    """One step of the zoo's CNN: the same peak eagerly with SINGA's from_numpy inputs (which
    require a gradient) as with placeholders (which do not), and as the compiled plan."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 4).astype(np.int32)
    timelines, _ = measure_step(lambda: create_model("cnn"), x, y)
    dev = device.create_cpu_device(None, policy="best_fit")
    dev.SetRandSeed(0)
    m = create_model("cnn")
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx, ty = tensor.from_numpy(x, dev), tensor.from_numpy(y, dev)
    m.compile([tx], is_train=True, use_graph=False)
    m(tx, ty)  # warm-up: the optimizer's state appears on the first step
    with dev.sampling_memory() as samples:
        m(tx, ty)
    assert Timeline.from_samples("from_numpy", samples).peak == timelines["eager"].peak


def test_bad_operator_input_is_a_value_error_and_singas_assertion_error():
    dev = device.create_cpu_device("1MiB")
    x = tensor.from_numpy(np.zeros((2, 3), np.float32), dev)
    t = tensor.from_numpy(np.zeros((2, 3, 1), np.float32), dev)
    for call in (autograd.mse_loss, autograd.softmax_cross_entropy, autograd.ranking_loss):
        with pytest.raises(ValueError, match="shape") as raised:
            call(x, t)
        assert isinstance(raised.value, AssertionError)


def test_operations_before_the_first_parameter_keep_nothing_alive(training):
    """relu(exp(x * x)) on an input batch is recorded (SINGA's contract) and saves tensors, but
    the walk never visits it: after the forward pass, with h and y left, what those operations
    made is gone, as with an input that requires no gradient."""

    def held_after_forward(requires_grad):
        dev = device.create_cpu_device("4MiB")
        x = tensor.from_numpy(np.ones((64, 64), np.float32), dev)
        x.requires_grad = requires_grad
        w = tensor.from_numpy(np.ones((64, 64), np.float32), dev)
        w.stores_grad = True
        h = x
        for _ in range(3):
            h = autograd.relu(autograd.exp(autograd.mul(h, h) * 0.1))
        y = autograd.mul(w, h)
        assert y.creator.grad_flows == (True, False)
        return dev.memory_stats()["allocated_bytes.current"]

    assert held_after_forward(True) == held_after_forward(False)


def test_a_direct_backward_leaves_the_operator_in_its_forward_phase(training):
    dev = device.create_cpu_device("1MiB")
    y = autograd.relu(tensor.from_numpy(np.array([1.0, -1.0], np.float32), dev))
    y.creator.backward(tensor.from_numpy(np.ones(2, np.float32), dev))
    assert y.creator.phase == "forward"
