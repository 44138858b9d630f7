"""A pool that is too small: the error says what was asked, what is free, who holds memory."""

import numpy as np
import pytest

from nnmem import autograd, device, opt, tensor
from nnmem.memory import OutOfMemory, format_bytes
from nnmem.models import create_model
from nnmem.planning import smallest_pool


def test_training_in_a_too_small_pool_explains_itself_and_changes_nothing():
    dev = device.create_cpu_device("2MiB")  # the CNN's parameters alone take 1.7 MiB
    dev.SetRandSeed(0)
    model = create_model("cnn")
    model.set_optimizer(opt.SGD(lr=0.1))
    tx = tensor.PlaceHolder((64, 1, 28, 28), dev)
    ty = tensor.PlaceHolder((64,), dev, tensor.int32)
    model.compile([tx], is_train=True)
    tx.copy_from_numpy(np.zeros(tx.shape, np.float32))
    ty.copy_from_numpy(np.zeros(64, np.int32))
    before = {k: tensor.to_numpy(v) for k, v in model.get_params().items()}
    with pytest.raises(OutOfMemory) as info:
        model(tx, ty)
    message = str(info.value)
    assert "conv1:Conv2d (64, 20, 24, 24) float32" in message  # the request that failed...
    assert "parameter linear1.W (800, 500) float32" in message  # ...and the biggest holders
    assert "pool_bytes" in message and "smaller batch" in message
    assert info.value.request > info.value.largest_free_block
    for k, v in model.get_params().items():
        np.testing.assert_array_equal(tensor.to_numpy(v), before[k])


def test_the_same_step_fits_in_a_larger_pool():
    dev = device.create_cpu_device("32MiB")
    model = create_model("cnn")
    model.set_optimizer(opt.SGD(lr=0.1))
    tx = tensor.PlaceHolder((64, 1, 28, 28), dev)
    model.compile([tx], is_train=True)
    tx.copy_from_numpy(np.zeros(tx.shape, np.float32))
    model(tx, tensor.from_numpy(np.zeros(64, np.int32), dev))
    assert dev.memory_stats()["allocated_bytes.peak"] < 32 * 2**20


def test_the_report_gives_a_lower_bound_on_the_pool_that_fits():
    dev = device.create_cpu_device("2MiB")
    model = create_model("cnn")
    model.set_optimizer(opt.SGD(lr=0.1))
    tx = tensor.PlaceHolder((64, 1, 28, 28), dev)
    model.compile([tx], is_train=True)
    tx.copy_from_numpy(np.zeros(tx.shape, np.float32))
    with pytest.raises(OutOfMemory) as info:
        model(tx, tensor.from_numpy(np.zeros(64, np.int32), dev))
    e = info.value
    in_use = e.capacity - e.free_bytes
    assert e.capacity_lower_bound == in_use + e.request
    assert (
        f"use a pool of at least {format_bytes(in_use + e.request)} ({in_use + e.request} "
        "bytes: those in use plus this request" in str(e)
    )


@pytest.mark.parametrize("use_graph", [True, False], ids=["graph", "eager"])
def test_smallest_pool_is_the_pool_training_and_evaluation_need(use_graph):
    shape = (16, 1, 28, 28)
    needed = smallest_pool(create_model("mlp"), shape, use_graph=use_graph)

    def train_and_evaluate(pool_bytes):
        dev = device.create_cpu_device(pool_bytes)
        model = create_model("mlp")
        model.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
        tx = tensor.PlaceHolder(shape, dev)
        ty = tensor.PlaceHolder(shape[:1], dev, tensor.int32)
        model.compile([tx], is_train=True, use_graph=use_graph)
        tx.copy_from_numpy(np.zeros(shape, np.float32))
        ty.copy_from_numpy(np.zeros(shape[:1], np.int32))
        for _ in range(3):
            model(tx, ty)
        model.eval()
        model(tx)
        return dev.memory_stats()["high_water_bytes"]

    assert train_and_evaluate(needed) <= needed  # it fits
    if use_graph:  # the plan is the floor; eager blocks land elsewhere in a smaller pool
        with pytest.raises(OutOfMemory):
            train_and_evaluate(needed - 256)


def test_a_parameter_that_does_not_fit_is_named_and_an_empty_batch_is_refused():
    from nnmem import layer

    dev = device.create_cpu_device("1MiB")
    x = tensor.from_numpy(np.zeros((2, 800), np.float32), dev)
    fc = layer.Linear(500)
    fc.name = "linear1"
    with pytest.raises(OutOfMemory) as e:
        fc(x)
    assert "parameter linear1.W (800, 500) float32" in str(e.value)
    empty = tensor.from_numpy(np.zeros((0, 3), np.float32), dev)
    with pytest.raises(ValueError, match="empty batch"):
        autograd.softmax_cross_entropy(empty, tensor.from_numpy(np.zeros(0, np.int32), dev))
