"""Eager offloading: SuperNeurons' Unified Tensor Pool with its LRU tensor cache
(nnmem.memory.cache)."""

import threading

import numpy as np
import pytest
from training import assert_identical, batches, train

import nnmem.ops.conv as conv_op
from nnmem import device, tensor
from nnmem.memory import OutOfMemory, TransferError
from nnmem.memory.cache import TensorCache
from nnmem.models import create_model


def mlp():
    return create_model("mlp", hidden=(256, 256, 256))


MLP_BATCHES = batches((32, 1, 28, 28), 3)


def eager(make, data, **options):
    return train(make(), data, use_graph=False, **options)


def test_nothing_moves_when_the_model_fits():
    reference = eager(mlp, MLP_BATCHES)
    result = eager(mlp, MLP_BATCHES, offload="all")
    assert_identical(reference, result)
    stats = result[2].memory_stats()
    assert stats["cache.bytes_to_host"] == stats["cache.bytes_to_device"] == 0
    assert stats["cache.misses"] == 0 and stats["cache.hits"] > 0


def resnet():
    return create_model("resnet", depth=8)


RESNET_BATCHES = batches((16, 3, 32, 32), 2)


@pytest.fixture
def direct_convolutions(monkeypatch):
    """Convolutions without a workspace: "auto" sizes its workspace to the free memory, which
    a budget changes, and the chunking (of the GEMM, of conv3x3's backward filter) changes the
    last bits of the numbers."""
    monkeypatch.setattr(conv_op, "WORKSPACE_LIMIT_BYTES", 0)


def test_bytes_moved_grow_as_the_budget_shrinks(direct_convolutions):
    """SuperNeurons' Table 3 shape: the tighter the budget, the more the cache moves; the
    numbers never change, and the pool never holds more than the budget."""
    reference = eager(resnet, RESNET_BATCHES)
    peak = reference[2].memory_stats()["allocated_bytes.peak"]
    moved = []
    for fraction in (1.0, 0.97, 0.95):
        budget = int(peak * fraction)
        result = eager(resnet, RESNET_BATCHES, offload="all", budget=budget)
        assert_identical(reference, result)
        stats = result[2].memory_stats()
        assert stats["allocated_bytes.peak"] <= budget
        assert stats["cache.bytes_to_device"] <= stats["cache.bytes_to_host"]
        moved.append(stats["cache.bytes_to_host"])
    assert moved[0] == 0 and moved[-1] > 0
    assert moved == sorted(moved)


def test_conv_policy_evicts_only_convolution_inputs(direct_convolutions, monkeypatch):
    reference = eager(resnet, RESNET_BATCHES)
    peak = reference[2].memory_stats()["allocated_bytes.peak"]
    evicted_by = []
    real = TensorCache._copy_out
    saved_by = {}
    real_consider = TensorCache.consider

    def consider(self, operator_name, blocks):
        for block in blocks:
            saved_by.setdefault(id(block), set()).add(operator_name)
        real_consider(self, operator_name, blocks)

    def copy_out(self, block):
        evicted_by.append(saved_by[id(block)])
        real(self, block)

    monkeypatch.setattr(TensorCache, "consider", consider)
    monkeypatch.setattr(TensorCache, "_copy_out", copy_out)
    result = eager(resnet, RESNET_BATCHES, offload="conv", budget=int(peak * 0.97))
    assert_identical(reference, result)
    assert evicted_by and all("Conv2d" in names for names in evicted_by)


def test_conv_networks_well_under_their_peak():
    """70% of the peak, eagerly: ResNet-8 trains, moving tensors out and back. (Half is too
    little at this size: with conv3x3's small workspaces the peak is mostly the parameters,
    their momentum and the running layer's tensors, which no cache can move, and at 60% the
    free space left is too fragmented for a 128 KiB map.)"""
    data = batches((8, 3, 16, 16), 3)
    reference = eager(resnet, data)
    peak = reference[2].memory_stats()["allocated_bytes.peak"]
    budget = int(peak * 0.7)
    result = eager(resnet, data, offload="all", budget=budget)
    # "auto" sized the workspaces to what the budget left: the batch is chunked differently
    np.testing.assert_allclose(result[0], reference[0], rtol=1e-5)
    stats = result[2].memory_stats()
    assert stats["allocated_bytes.peak"] <= budget
    assert stats["cache.misses"] > 0


def test_out_of_memory_when_nothing_can_move():
    data = batches((32, 1, 28, 28), 1)
    with pytest.raises(OutOfMemory, match="budget"):
        eager(mlp, data, offload="all", budget=2 * 2**20)


def test_a_failed_copy_changes_nothing(direct_convolutions):
    data = RESNET_BATCHES + batches((16, 3, 32, 32), 1, seed=1)
    reference = eager(resnet, data)
    peak = reference[2].memory_stats()["allocated_bytes.peak"]
    m = resnet()
    dev = device.create_cpu_device("256MiB")
    losses, states, _, tx, ty = train(
        m, data[:1], use_graph=False, dev=dev, offload="all", budget=int(peak * 0.95)
    )
    assert dev.memory_stats()["cache.bytes_to_host"] > 0
    real = dev.queue_copy

    def broken(dst, src, stream, label):
        def fail(*_):
            raise OSError("injected")

        stream.submit(fail)

    dev.queue_copy = broken
    tx.copy_from_numpy(data[1][0])
    ty.copy_from_numpy(data[1][1])
    with pytest.raises(TransferError, match="injected"):
        m(tx, ty)
    for name, value in m.get_states().items():
        np.testing.assert_array_equal(tensor.to_numpy(value), states[name], err_msg=name)
    dev.queue_copy = real
    for x, y in data[1:]:
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        losses.append(tensor.to_numpy(m(tx, ty)[1])[0])
    assert losses == reference[0]


def evicted_tensor(dev):
    """A tensor made during a step and moved to the host by the device's cache."""
    with dev.step():  # made during a step: an activation, as far as the cache can tell
        t = tensor.from_numpy(np.arange(1024, dtype=np.float32), dev)
        dev.cache.consider("test", [t.block])
        dev.cache._copy_out(dev.cache.resident.pop(id(t.block)))
        dev.cache._settle(id(t.block), keep_on_device=False)
    assert t.block.host is not None
    return t


def test_an_evicted_tensor_reads_back_through_every_path():
    """to_numpy, a host write and an operation all bring an evicted tensor back first."""
    dev = device.create_cpu_device("64MiB")
    dev.set_memory_budget(None, TensorCache(dev, "all"))
    t = evicted_tensor(dev)
    assert t.block.offset is None and t.block.allocated
    np.testing.assert_array_equal(tensor.to_numpy(t), np.arange(1024, dtype=np.float32))
    assert t.block.host is None and dev.memory_stats()["cache.misses"] == 1
    del t  # freeing a tensor frees its host copy too
    assert dev.memory_stats()["host.allocated_bytes.current"] == 0


@pytest.mark.parametrize("offload", ["none", "conv"])
def test_compiling_another_model_brings_back_what_the_cache_moved_out(offload):
    """The cache is the device's, and only a cache fetches what it evicted: a compile that
    replaces it (or drops it) brings the evicted tensors back first. They were read through
    a cache that was gone (an AttributeError) before."""
    dev = device.create_cpu_device("64MiB")
    first = mlp()
    first.compile([tensor.PlaceHolder((4, 1, 28, 28), dev)], is_train=True, offload="all")
    kept = evicted_tensor(dev)  # an output the user holds on to
    second = mlp()
    second.compile([tensor.PlaceHolder((4, 1, 28, 28), dev)], is_train=True, offload=offload)
    assert kept.block.host is None and kept.block.offset is not None
    assert (dev.cache is None) == (offload == "none")
    np.testing.assert_array_equal(tensor.to_numpy(kept), np.arange(1024, dtype=np.float32))
    assert dev.memory_stats()["host.allocated_bytes.current"] == 0


def test_a_compile_waits_for_another_threads_step_on_the_device():
    """The budget and the cache would otherwise change under a running step (a step with
    evicted tensors then read them through no cache at all)."""
    dev = device.create_cpu_device("64MiB")
    first = mlp()
    tx = tensor.PlaceHolder((4, 1, 28, 28), dev)
    first.compile([tx], is_train=False, offload="all")
    tx.copy_from_numpy(np.zeros((4, 1, 28, 28), np.float32))
    compiled, seen_during_the_step = threading.Event(), []

    def compile_another():
        mlp().compile([tensor.PlaceHolder((4, 1, 28, 28), dev)], is_train=False)
        compiled.set()

    original = dev.exec

    def exec_(fn, reads, writes, **kwargs):
        if not seen_during_the_step:  # the step's first operation: start the other compile
            threading.Thread(target=compile_another).start()
            compiled.wait(0.5)
            seen_during_the_step.append((compiled.is_set(), dev.cache is not None))
        return original(fn, reads, writes, **kwargs)

    dev.exec = exec_
    first(tx)
    dev.exec = original
    assert seen_during_the_step == [(False, True)]  # not compiled yet, the cache still there
    assert compiled.wait(60) and dev.cache is None  # then it was
