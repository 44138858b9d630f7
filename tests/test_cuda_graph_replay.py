"""cuda_graph.CapturedReplay, the order of a step replayed as CUDA graphs: the compute phase and
the commit phase, each cut at its host calls into runs of kernels, one graph per run, the host
calls run between the graphs in the recorded order. Stand-in graphs run their calls when
launched (capturing needs a GPU; tests/cuda and bench/gpu_capture.py run real ones)."""

import pytest

cuda_graph = pytest.importorskip(
    "nnmem.devices.cuda_graph", reason="needs cuda.bindings (pip install 'nnmem[cuda]')"
)
from nnmem.graph.skipped import SkippedStep  # noqa: E402


class StandInGraph:
    def __init__(self, calls, stream, key, source=None, measured=None):
        self.calls = list(calls)

    def launch(self):
        for _, fn, arrays in self.calls:
            fn(*arrays)


def step(log, raising=False):
    def kernel(name):
        return (name, lambda: log.append(name), [])

    def host(name):
        def fn():
            log.append(name)
            if raising:
                raise SkippedStep(name)

        fn.runs_on_host = True
        return (name, fn, [])

    calls = [kernel("k1"), kernel("k2"), host("check"), kernel("k3")]
    split = len(calls)
    calls += [kernel("update1"), host("collective"), kernel("update2")]
    return calls, split


def test_host_calls_cut_each_phase_into_graphs_run_in_the_recorded_order(monkeypatch):
    monkeypatch.setattr(cuda_graph, "CapturedStep", StandInGraph)
    log, ended = [], []
    calls, split = step(log)
    replay = cuda_graph.CapturedReplay(
        calls, split, None, "key", calls, after_compute=lambda r: ended.append(list(log))
    )
    assert log == [] and replay.graphs() == 4  # [k1 k2] check [k3] | [update1] coll. [update2]
    replay.compute()
    assert log == ["k1", "k2", "check", "k3"] and ended == [log[:4]]
    replay.commit()
    assert log[4:] == ["update1", "collective", "update2"]
    assert replay.source is calls and replay.key == "key"


def test_a_host_call_that_skips_the_step_ends_the_compute_phase_there(monkeypatch):
    monkeypatch.setattr(cuda_graph, "CapturedStep", StandInGraph)
    log, ended = [], []
    calls, split = step(log, raising=True)
    replay = cuda_graph.CapturedReplay(
        calls, split, None, "key", calls, after_compute=lambda r: ended.append(r)
    )
    with pytest.raises(SkippedStep):
        replay.compute()
    assert log == ["k1", "k2", "check"] and ended == []  # k3 and the commit never ran
