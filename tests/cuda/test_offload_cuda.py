"""Offloading on the CUDA device (run on a GPU, or on Numba's CUDA simulator): the transfer
engine's copies on the copy stream into pinned host memory, and the eager tensor cache, leave
every number as it was; an offloading step goes through the device's CUDA graph path (the
simulator has no graphs: a stand-in replays what was captured)."""

import sys

import numpy as np
import pytest
from cuda_testutil import needs_device

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
from training import assert_identical, batches, train  # noqa: E402

from nnmem import autograd, device, tensor  # noqa: E402
from nnmem.devices import cuda_graph  # noqa: E402
from nnmem.memory.cache import TensorCache  # noqa: E402
from nnmem.models import create_model  # noqa: E402

pytestmark = needs_device
DATA = batches((2, 1, 4, 4), 2)  # tiny: the simulator runs every thread in Python


def mlp():
    return create_model("mlp", hidden=(8, 8))


def run(use_graph=True, **options):
    return train(mlp(), DATA, use_graph=use_graph, dev=device.create_cuda_gpu("64MiB"), **options)


@pytest.fixture(scope="module")
def plain():
    """The reference: the step compiled without offloading."""
    training = autograd.training  # compiling sets it; the per-test restore runs after this
    yield run()
    autograd.training = training


@pytest.mark.parametrize("asynchronous", [True, False])
def test_graph_offloading_on_the_gpu_changes_no_number(plain, asynchronous):
    result = run(offload="all", async_offload=asynchronous)
    assert_identical(plain, result)
    stats = result[2].memory_stats()
    assert stats["offload.bytes_to_host"] == stats["offload.bytes_to_device"] > 0
    assert stats["host.allocated_bytes.peak"] > 0  # the host pool: pinned memory


class ReplayedGraph:
    """Stands in for cuda_graph.CapturedStep on the simulator: "captures" by keeping the calls
    and "launches" by running them in order."""

    made = []

    def __init__(self, calls, stream, key, source=None, measured=None):
        self.calls, self.key, self.measured = calls, key, measured
        self.source = calls if source is None else source
        self.launches = 0
        ReplayedGraph.made.append(self)

    def launch(self):
        for _, fn, arrays in self.calls:
            fn(*arrays)
        self.launches += 1


def test_an_offloading_step_goes_through_the_graph_path(plain, monkeypatch):
    monkeypatch.setattr(cuda_graph, "CapturedStep", ReplayedGraph)
    monkeypatch.setattr(cuda_graph, "record_node", lambda event, stream: event.record(stream))
    monkeypatch.setattr(ReplayedGraph, "made", [])
    dev = device.create_cuda_gpu("64MiB")
    dev.use_cuda_graphs = True
    reported = []  # the figures of every step, uncaptured (the first replay) or captured
    monkeypatch.setattr(dev, "set_offload_stats", lambda stats: reported.append(stats))
    result = train(mlp(), DATA, use_graph=True, dev=dev, offload="all")
    assert_identical(plain, result)
    compute, commit = ReplayedGraph.made  # captured once, at the second replay: 2 graphs
    assert compute.launches == commit.launches == 1
    # the copies join the compute phase's graph; the commit's has none
    assert [name for name, _, _ in compute.calls][-1] == "join:copy stream"
    assert not any(name.startswith(("join", "wait")) for name, _, _ in commit.calls)
    assert len(reported) == len(DATA)  # the launch reports its figures too (offload.*)
    assert reported[-1]["offload.mode"] == "async"
    assert reported[-1]["offload.bytes_to_host"] == reported[-1]["offload.bytes_to_device"] > 0


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
