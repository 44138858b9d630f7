"""SINGA's optimizers in whole training steps: a failed step leaves RMSProp's and AdaGrad's
state (and state restored by set_states) exactly as it was, eager and in graph mode."""

import gc

import numpy as np
import pytest
from training import batches

from nnmem import device, layer, model, opt, tensor
from nnmem.memory import OutOfMemory


class MLP(model.Model):
    def __init__(self):
        super().__init__()
        self.flat = layer.Flatten()
        self.fc1, self.fc2 = layer.Linear(8), layer.Linear(10)
        self.relu, self.loss = layer.ReLU(), layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(self.flat(x))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


# Each failed step is followed by gc.collect(): over the test's own objects only (conftest.py)
pytestmark = pytest.mark.usefixtures("frozen_heap")

DATA = batches((4, 1, 4, 4), 3, seed=2)
OPTIMIZERS = {
    "rmsprop": lambda: opt.RMSProp(lr=opt.ExponentialDecay(0.01, 1, 0.9), weight_decay=1e-3),
    "adagrad": lambda: opt.AdaGrad(lr=0.05, weight_decay=1e-3),
}


def setup(use_graph, optimizer):
    dev = device.create_cpu_device("16MiB")
    dev.SetRandSeed(0)
    m = MLP()
    m.set_optimizer(optimizer)
    tx = tensor.PlaceHolder(DATA[0][0].shape, dev)
    ty = tensor.PlaceHolder(DATA[0][1].shape, dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph)
    tx.copy_from_numpy(DATA[0][0])
    ty.copy_from_numpy(DATA[0][1])
    return dev, m, tx, ty


def step(m, tx, ty, batch):
    tx.copy_from_numpy(batch[0])
    ty.copy_from_numpy(batch[1])
    return m(tx, ty)


def snapshot(m):
    """The parameters and everything the optimizer holds (its get_states)."""
    params = {k: tensor.to_numpy(v) for k, v in m.get_states().items()}
    return params, m.optimizer.get_states(), len(m.optimizer.moments)


def assert_same(a, b):
    assert a[2] == b[2], "a failed step kept state it made"
    assert a[0].keys() == b[0].keys() and a[1].keys() == b[1].keys()
    for k in a[0]:
        np.testing.assert_array_equal(a[0][k], b[0][k], err_msg=k)
    assert a[1]["step_counter"] == b[1]["step_counter"], "step counter changed"
    for kind in a[1].keys() - {"step_counter"}:
        assert a[1][kind].keys() == b[1][kind].keys(), kind
        for name in a[1][kind]:
            np.testing.assert_array_equal(a[1][kind][name], b[1][kind][name], err_msg=name)


def fail_with_out_of_memory_at(dev, k, call):
    """Run call() with the k-th allocation failing; return how many allocations it made."""
    calls, original = [], dev.pool.alloc

    def failing(nbytes, owner=None):
        calls.append(1)
        if len(calls) == k + 1:
            raise OutOfMemory(nbytes, 0, 0, dev.pool.capacity, nbytes=nbytes, requester=owner)
        return original(nbytes, owner)

    dev.pool.alloc = failing
    try:
        call()
    except OutOfMemory:
        pass
    finally:
        dev.pool.alloc = original
    gc.collect()
    return len(calls)


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("first_step", [True, False])
def test_out_of_memory_at_any_allocation_leaves_the_optimizer_as_it_was(name, first_step):
    dev, m, tx, ty = setup(False, OPTIMIZERS[name]())
    reference = setup(False, OPTIMIZERS[name]())
    if not first_step:
        step(m, tx, ty, DATA[0])
        step(*reference[1:], DATA[0])
    step(*reference[1:], DATA[1])
    k = 0
    while True:
        before = snapshot(m)
        made = fail_with_out_of_memory_at(dev, k, lambda: step(m, tx, ty, DATA[1]))
        if made <= k:  # no allocation failed: the step went through
            break
        assert_same(snapshot(m), before)
        k += 1
    assert k > 5  # activations, gradients and (on the first step) the optimizer's state
    assert_same(snapshot(m), snapshot(reference[1]))  # and it trained to the same numbers


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_bad_label_changes_nothing_eager_and_graph(name):
    for use_graph in (False, True):
        dev, m, tx, ty = setup(use_graph, OPTIMIZERS[name]())
        step(m, tx, ty, DATA[0])
        before = snapshot(m)
        bad = (DATA[1][0], np.full_like(DATA[1][1], 10))  # 10 classes: labels 0..9
        with pytest.raises(ValueError):
            step(m, tx, ty, bad)
        assert_same(snapshot(m), before)


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
def test_state_restored_before_the_first_step_survives_a_failed_one(use_graph):
    """set_states before the first step holds the state until the parameters come; a first
    step that fails must keep it for the next one, not fall back to zeros."""
    _, trained, tx0, ty0 = setup(use_graph, OPTIMIZERS["rmsprop"]())
    step(trained, tx0, ty0, DATA[0])
    step(trained, tx0, ty0, DATA[1])
    saved_params = {k: tensor.to_numpy(v) for k, v in trained.get_states().items()}
    saved = trained.optimizer.get_states()
    step(trained, tx0, ty0, DATA[2])

    dev, m, tx, ty = setup(use_graph, OPTIMIZERS["rmsprop"]())
    m.set_states(saved_params)
    m.optimizer.set_states(saved)
    before = snapshot(m)
    for k in (0, 3):  # the first allocation of the step, and one after backward began
        fail_with_out_of_memory_at(dev, k, lambda: step(m, tx, ty, DATA[2]))
        assert_same(snapshot(m), before)
    step(m, tx, ty, DATA[2])
    assert_same(snapshot(m), snapshot(trained))
