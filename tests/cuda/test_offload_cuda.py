"""Offloading on the CUDA device (run on a GPU, or on Numba's CUDA simulator): the transfer
engine's copies on the copy stream into pinned host memory, and the eager tensor cache, leave
every number as it was."""

import sys

import numpy as np
import pytest
from cuda_testutil import needs_device

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
from training import assert_identical, batches, train  # noqa: E402

from nnmem import device, tensor  # noqa: E402
from nnmem.memory.cache import TensorCache  # noqa: E402
from nnmem.models import create_model  # noqa: E402

pytestmark = needs_device
DATA = batches((2, 1, 4, 4), 2)  # tiny: the simulator runs every thread in Python


def mlp():
    return create_model("mlp", hidden=(8, 8))


def run(use_graph=True, **options):
    return train(mlp(), DATA, use_graph=use_graph, dev=device.create_cuda_gpu("64MiB"), **options)


@pytest.mark.parametrize("asynchronous", [True, False])
def test_graph_offloading_on_the_gpu_changes_no_number(asynchronous):
    result = run(offload="all", async_offload=asynchronous)
    assert_identical(run(), result)
    stats = result[2].memory_stats()
    assert stats["offload.bytes_to_host"] == stats["offload.bytes_to_device"] > 0
    assert stats["host.allocated_bytes.peak"] > 0  # the host pool: pinned memory


def test_the_tensor_cache_moves_gpu_bytes_out_and_back():
    dev = device.create_cuda_gpu("64MiB")
    dev.set_memory_budget(None, TensorCache(dev, "all"))
    values = np.arange(1000, dtype=np.float32)
    with dev.step():  # made during a step: a candidate
        t = tensor.from_numpy(values, dev)
        dev.cache.consider("test", [t.block])
        dev.cache._copy_out(dev.cache.resident.pop(id(t.block)))
        dev.cache._settle(id(t.block), keep_on_device=False)
    assert t.block.offset is None and t.block.host is not None
    np.testing.assert_array_equal(tensor.to_numpy(t), values)  # fetched back first
    stats = dev.memory_stats()
    assert stats["cache.bytes_to_host"] == stats["cache.bytes_to_device"] == values.nbytes
