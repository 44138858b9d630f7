"""A pool that is too small: the error says what was asked, what is free, who holds memory."""
import numpy as np
import pytest

from nnmem import device, opt, tensor
from nnmem.memory import OutOfMemory
from nnmem.models import create_model


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
