"""The capturable form of an offloading step (graph/engine.py:CaptureForm), which the CUDA
device records as one CUDA graph: no host query or synchronisation inside, the copy stream
forked from the compute stream and joined back before the commit, timing events recorded as
graph nodes, the same kernels in the same order -- and, run for real on the CPU's streams,
the same numbers and the offload.* figures."""

import pytest
from training import assert_identical, batches, planned_step, train

from nnmem import autograd
from nnmem.devices.cpu import CpuDevice
from nnmem.graph.engine import TransferEngine
from nnmem.models import create_model

SHAPE = (4, 3, 16, 16)
KERNEL = object()  # the arrays of a kernel call: the fake device runs no kernel


class FakeStream:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def synchronize(self):
        self.log.append(("synchronize", None, self.name))


class FakeEvent:
    """An event that logs what is done with it; 1 ms between any two."""

    def __init__(self, log):
        self.log = log

    def record(self, stream):
        self.log.append(("record", self, stream.name))

    def wait(self, stream):
        self.log.append(("wait", self, stream.name))

    def query(self):
        self.log.append(("query", self, None))
        return False

    def elapsed_time(self, end):
        return 1.0


class FakeDevice:
    """Streams and events that log every call, and copies that only log themselves."""

    def __init__(self):
        self.log = []
        self.compute_stream = FakeStream("compute", self.log)
        self.copy_stream = FakeStream("copy", self.log)

    def create_event(self):
        return FakeEvent(self.log)

    def queue_copy(self, dst, src, stream, label):
        self.log.append(("copy", label, stream.name))

    def raise_copy_failure(self, label):
        self.log.append(("raise_copy_failure", label, None))


@pytest.fixture(scope="module")
def planned():
    training = autograd.training  # compiling sets it; the per-test restore runs after this
    yield planned_step("resnet", SHAPE, {"depth": 8}, offload="all")
    autograd.training = training


def built(step, **engine_options):
    """A fake device's engine with the step's calls built; (engine, calls, split)."""
    engine = TransferEngine(FakeDevice(), **engine_options)

    def arrays_of(node):
        return ["dst", "src"] if node.stream == "copy" else [KERNEL]

    calls, split = engine.calls(step.nodes, step.order, step.commit_start, arrays_of)
    return engine, calls, split


def run(dev, calls):
    """Run the calls on the fake device, logging each kernel in its place."""
    for name, fn, arrays in calls:
        if arrays == [KERNEL]:
            dev.log.append(("kernel", name, "compute"))
        else:
            fn(*arrays)


def record_node(event, stream):
    event.log.append(("node", event, stream.name))


def test_the_capture_form_queries_and_synchronises_nothing(planned):
    engine, calls, _ = built(planned)
    dev = engine.device
    run(dev, calls)  # the uncaptured form asks the events: illegal while capturing
    assert any(what == "query" for what, _, _ in dev.log)
    dev.log.clear()
    form = engine.capture_form(record_node)
    run(dev, form.calls)
    assert {what for what, _, _ in dev.log} == {"record", "wait", "node", "copy", "kernel"}
    engine.finish()  # what the uncaptured step does at the end of its compute phase
    assert dev.log[-1] == ("synchronize", None, "copy")


def test_the_copy_stream_forks_and_joins_back_before_the_commit(planned):
    engine, calls, split = built(planned)
    dev = engine.device
    form = engine.capture_form(record_node)
    run(dev, form.calls)
    log = dev.log
    on_copy = [i for i, (_, _, stream) in enumerate(log) if stream == "copy"]
    # fork: the copy stream's first work waits for an event the compute stream recorded
    first = on_copy[0]
    assert log[first][0] == "wait" and log[first - 1] == ("record", log[first][1], "compute")
    # join: the compute stream waits for the copy stream's last record, before any commit
    last = on_copy[-1]
    assert log[last][0] == "record" and log[last + 1] == ("wait", log[last][1], "compute")
    commit = {name for name, _, _ in calls[split:]}
    kernels = [i for i, (what, name, _) in enumerate(log) if what == "kernel"]
    assert commit and all(i > last for i in kernels if log[i][1] in commit)
    assert any(i < last for i in kernels)  # the copies overlap the compute phase
    assert [n for n, _, _ in form.calls].count("join:copy stream") == 1


def test_same_kernels_same_arrays_same_order_and_every_wait_kept(planned):
    engine, calls, _ = built(planned)
    form = engine.capture_form(record_node)
    kernels = [(n, fn, a) for n, fn, a in calls if a == [KERNEL]]
    assert [(n, fn, a) for n, fn, a in form.calls if a == [KERNEL]] == kernels
    plain = [n for n, _, _ in calls]
    assert [n for n, _, _ in form.calls if n != "join:copy stream"] == plain
    # every wait waits for the event recorded right after its copy, on the copy stream
    dev = engine.device
    run(dev, form.calls)
    after_copy = {
        dev.log[i + 2][1]
        for i, (what, _, _) in enumerate(dev.log)
        if what == "copy"  # copy, its end's node, then the event the readers wait for
    }
    waited = {e for what, e, stream in dev.log if what == "wait" and stream == "compute"}
    n_waits = sum(1 for n in plain if n.startswith("wait:"))
    assert n_waits > 0 and len(waited & after_copy) == n_waits


def test_timing_events_are_graph_nodes_and_measure_reads_them(planned):
    engine, _, _ = built(planned)
    form = engine.capture_form(record_node)
    run(engine.device, form.calls)
    nodes = [(e, stream) for what, e, stream in engine.device.log if what == "node"]
    timed = {e for _, s, t in form.transfers for e in (s, t)}
    timed |= {e for _, b, a in form.waits for e in (b, a)}
    assert {e for e, _ in nodes} == timed and len(nodes) == len(timed)
    figures = form.measure()  # 1 ms between any two fake events
    assert figures["offload.tensors"] == planned.offloaded
    assert figures["offload.transfer_seconds"] == pytest.approx(2 * planned.offloaded * 1e-3)
    assert figures["offload.stall_seconds"] == pytest.approx(len(form.waits) * 1e-3)
    assert figures["offload.mode"] == "async" and figures["offload.bytes_to_host"] > 0


@pytest.mark.parametrize("options", [{"synchronous": True}, {"trace": True}])
def test_sync_mode_and_tracing_have_no_capture_form(planned, options):
    engine = TransferEngine(FakeDevice(), options.get("synchronous", False))
    engine.trace = options.get("trace", False)
    engine.calls(planned.nodes, planned.order, planned.commit_start, lambda node: [])
    with pytest.raises(ValueError, match="asynchronous engine without tracing"):
        engine.capture_form(record_node)


class CapturingCpu(CpuDevice):
    """A CPU device that replays an offloading step, from its second replay, through the
    capture form, as the CUDA device's graph launch does: the copies run on the CPU's copy
    stream (a worker thread, slowed to a PCIe-like link), so the form's waits are tested."""

    launches = 0

    def captured_replay(self, step, host_values):
        if step.engine is None or step.replays < 2:
            return None
        form = step.engine.capture_form(lambda event, stream: event.record(stream))
        device = self

        class Replay:
            def compute(self):
                for _, fn, arrays in form.calls[: form.split]:
                    fn(*arrays)
                device.Sync()
                device.set_offload_stats(form.measure())

            def commit(self):
                for _, fn, arrays in form.calls[form.split :]:
                    fn(*arrays)
                device.launches += 1

        return Replay()


def test_the_capture_form_run_for_real_changes_no_number():
    data = batches(SHAPE, 4)
    resnet = lambda: create_model("resnet", depth=8)  # noqa: E731
    reference = train(resnet(), data, use_graph=True, offload="all")
    dev = CapturingCpu(1 << 26, link_gbps=0.5)
    result = train(resnet(), data, use_graph=True, offload="all", dev=dev)
    assert dev.launches >= 2
    assert_identical(reference, result)
    stats = dev.memory_stats()
    assert stats["offload.transfer_seconds"] > stats["offload.stall_seconds"] >= 0
    assert stats["offload.bytes_to_host"] == stats["offload.bytes_to_device"] > 0
