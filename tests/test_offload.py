"""Offloading in graph mode (nnmem.graph.offload, nnmem.graph.engine): the rewrite, the plan,
the engine's waits, budgets and vDNN's dynamic policy, failed and slow copies."""

import random
import time

import numpy as np
import pytest
from training import assert_identical, batches, planned_step, train

from nnmem import device, tensor
from nnmem.devices import streams
from nnmem.graph.offload import MARKER, offload_candidates
from nnmem.memory import OutOfMemory
from nnmem.memory.errors import TransferError
from nnmem.models import create_model


def resnet():
    return create_model("resnet", depth=8)  # a join (the residual Add) and fans


def cnn():
    return create_model("cnn")


MODELS = {"resnet": (resnet, (4, 3, 16, 16)), "cnn": (cnn, (4, 1, 28, 28))}


def compiled(model, data, **options):
    """Train on `data`; return the result of training.train and the compiled step."""
    result = train(model, data, use_graph=True, **options)
    _, _, dev, tx, ty = result
    return result, model.compiled_step(tx, ty)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("policy", ["conv", "all"])
@pytest.mark.parametrize("asynchronous", [True, False])
@pytest.mark.parametrize("sequential", [True, False])
def test_offloading_changes_no_number(name, policy, asynchronous, sequential):
    make, shape = MODELS[name]
    data = batches(shape, 3)
    reference = train(make(), data, use_graph=True, sequential=sequential)
    result, step = compiled(
        make(), data, sequential=sequential, offload=policy, async_offload=asynchronous
    )
    assert step.offloaded > 0
    assert_identical(reference, result)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_offloading_combines_with_recomputation(name):
    make, shape = MODELS[name]
    data = batches(shape, 3)
    reference = train(make(), data, use_graph=True)
    # "memory": cost-aware would drop recomputations that do not lower the offloaded peak
    result, step = compiled(make(), data, offload="all", recompute="memory")
    assert step.offloaded > 0 and step.recomputations > 0
    assert_identical(reference, result)
    # recomputations read the prefetched checkpoints, never the offloaded originals
    offloaded = {id(n.reads[0].block) for n in step.nodes if n.name.startswith("offload:")}
    for node in step.nodes:
        if node.phase in ("backward", "recompute"):
            assert not offloaded & {id(s.block) for s in node.reads}, node.name


def test_gradient_sums_are_recorded_as_backward():
    """A tensor read by two layers (ResNet's residual) gets its gradient summed in backward:
    the sum is a backward node, or the passes would take it for forward."""
    _, step = compiled(resnet(), batches((2, 3, 16, 16), 1))
    phases = [n.phase for n in step.recorded]
    first_backward = phases.index("backward")
    assert "forward" not in phases[first_backward:]


def planned(policy, recompute="none", depth=20):
    return planned_step(
        "resnet", (16, 3, 32, 32), {"depth": depth}, offload=policy, recompute=recompute
    )


def test_the_plan_sees_both_ranges_and_the_peak_drops():
    without, step = planned("none"), planned("all")
    assert step.layout.arena_bytes < 0.75 * without.layout.arena_bytes
    assert step.host_layout.arena_bytes > 0 and without.host_layout.arena_bytes == 0
    position = {i: p for p, i in enumerate(step.order)}
    live = {}
    for slot in step.slots:
        for block, span in zip(slot.blocks, slot.ranges):
            live[id(block)] = span
    checked = 0
    for i in step.order:
        node = step.nodes[i]
        if node.name.startswith("prefetch:"):
            shadow = node.writes[0].block
            # the prefetched copy lives from its prefetch to its last backward reader
            assert live[id(shadow)][0] == position[i]
            readers = [
                position[j]
                for j in step.order
                if step.nodes[j].reads and any(s.block is shadow for s in step.nodes[j].reads)
            ]
            assert live[id(shadow)][1] == max(readers)
            checked += 1
        if node.stream == MARKER:
            # the original lives until its release (copy-out done, by the plan), not into
            # backward: backward reads the prefetched copy
            original = node.reads[0].block
            assert live[id(original)][1] == position[i]
            assert all(
                step.nodes[j].phase == "forward"
                for j in step.order
                if any(s.block is original for s in step.nodes[j].reads)
            )
    assert checked == step.offloaded > 0


def test_conv_offloads_only_the_inputs_of_convolutions():
    step = planned("conv")
    conv_inputs = {
        id(s.block)
        for n in step.recorded
        if n.name.endswith(":Conv2d") and n.phase == "forward"
        for s in n.reads
    }
    chosen = offload_candidates(step.recorded, step.recorded_kinds, "conv")
    assert chosen and set(chosen) <= conv_inputs
    assert len(chosen) < len(offload_candidates(step.recorded, step.recorded_kinds, "all"))


def test_vdnn_prefetch_window():
    """Each backward layer prefetches at most one tensor ahead of need, and never one that a
    layer beyond the next CONV reads first."""
    step = planned("all", depth=8)
    nodes = step.nodes
    prefetches = [n for n in nodes if n.name.startswith("prefetch:")]
    assert prefetches
    for p in prefetches:
        shadow = p.writes[0].block
        reader = min(n.index for n in nodes if any(s.block is shadow for s in n.reads))
        between = [n for n in nodes[p.index + 1 : reader] if n.stream == "compute"]
        layers = []
        for n in between:
            if not layers or layers[-1] != n.name.split(":")[0]:
                layers.append(n.name.split(":")[0])
        conv_layers = {n.name.split(":")[0] for n in between if n.name.endswith(":Conv2d")}
        reader_layer = nodes[reader].name.split(":")[0]
        # issued at the start of a layer, for a later one, searching no further than the next
        # CONV layer: no CONV layer lies strictly between the two
        assert not conv_layers - {layers[0], reader_layer} if layers else True


def test_host_pool_statistics():
    data = batches((4, 1, 28, 28), 2)
    (_, _, dev, _, _), step = compiled(cnn(), data, offload="all")
    stats = dev.memory_stats()
    assert stats["host.allocated_bytes.current"] >= step.host_layout.arena_bytes > 0
    assert stats["offload.bytes_to_host"] == stats["offload.bytes_to_device"] > 0
    assert stats["offload.tensors"] == step.offloaded
    assert stats["offload.transfer_seconds"] > 0
    assert stats["offload.mode"] == "async"
    summary = step.memory_summary()
    assert summary["offload"] == "all" and summary["offloaded_tensors"] == step.offloaded


def test_sync_mode_synchronises_every_layer_and_async_never():
    data = batches((4, 1, 28, 28), 1)
    _, sync = compiled(cnn(), data, offload="all", async_offload=False)
    _, asynchronous = compiled(cnn(), data, offload="all")
    names = [name for name, _, _ in sync.calls]
    computed = [n for n in sync.nodes if n.stream == "compute" and n.phase != "update"]
    syncs = [n for n in names if n.startswith("sync:")]
    # every layer of forward and backward ends with a sync (the optimizer's updates need none)
    assert {s.removeprefix("sync:") for s in syncs} == {n.name.split(":")[0] for n in computed}
    assert not [n for n, _, _ in asynchronous.calls if n.startswith("sync:")]
    # the asynchronous engine waits for each prefetch right before its first reader only
    ran = iter(i for i in asynchronous.order if asynchronous.nodes[i].stream != MARKER)
    waiting, checked = [], 0
    for name, _, _ in asynchronous.calls:
        if name.startswith("wait:"):
            waiting.append(name)
            continue
        node = asynchronous.nodes[next(ran)]
        for wait in waiting:
            if wait.startswith("wait:prefetch of "):
                desc = wait[len("wait:prefetch of ") :] + " (prefetched)"
                assert desc in {s.block.desc for s in node.reads}, (wait, node.name)
                checked += 1
        waiting = []
    assert checked > 0


def test_lanes():
    data = batches((4, 1, 28, 28), 2)
    (_, _, dev, tx, ty), step = compiled(cnn(), data, offload="all")
    m_step = step
    m_step.trace_transfers()
    step.replay([tx, ty])
    lanes = step.engine.lanes()
    copies = [lane for lane in lanes if lane[0] == "copy"]
    compute = [lane for lane in lanes if lane[0] == "compute"]
    assert len(copies) == 2 * step.offloaded
    assert len(compute) == sum(1 for n in step.nodes if n.stream == "compute")
    assert all(0 <= start <= end for _, _, start, end in lanes)
    _, plain = compiled(cnn(), data)
    with pytest.raises(ValueError, match="offloads nothing"):
        plain.trace_transfers()


def test_budget_below_the_peak_with_dyn():
    """vDNN's dynamic policy under 65% of the no-offload peak: the pool never exceeds the
    budget, and the numbers are those of the same step without offloading (with the same
    convolution workspaces: dyn may have lowered them, which changes how the batch is chunked).
    Half the peak is too little here: what offload="all" with direct convolutions keeps on the
    device (parameters, momentum, the running layer's maps) is 61% of it."""
    data = batches((8, 3, 32, 32), 3)
    # the step an offloading plan starts from is the unfused recording (CompiledStep.recording)
    reference = train(resnet(), data, use_graph=True, fuse=False)
    peak = reference[2].memory_stats()["allocated_bytes.peak"]
    budget = int(peak * 0.65)
    result, step = compiled(resnet(), data, offload="dyn", budget=budget)
    dev = result[2]
    assert step.offload in ("conv", "all")
    assert dev.memory_stats()["allocated_bytes.peak"] <= budget
    same_workspaces = device.create_cpu_device("256MiB")
    same_workspaces.workspace_limit = step.workspace_limit
    assert_identical(train(resnet(), data, use_graph=True, dev=same_workspaces), result)


def test_dyn_keeps_the_fastest_policy_that_fits():
    data = batches((4, 1, 28, 28), 1)
    _, step = compiled(cnn(), data, offload="dyn", budget="200MiB")
    assert step.offload == "none" and step.workspace_limit is None


def test_budget_errors():
    data = batches((4, 1, 28, 28), 1)
    with pytest.raises(OutOfMemory, match="budget"):
        compiled(cnn(), data, budget=5 * 2**20)
    with pytest.raises(OutOfMemory, match="offload='dyn'"):
        compiled(cnn(), data, offload="dyn", budget=5 * 2**20)
    dev = device.create_cpu_device("64MiB")
    tx = tensor.PlaceHolder((4, 1, 28, 28), dev)
    m = cnn()
    for options, message in [
        (dict(offload="bogus"), "offload='bogus'"),
        (dict(offload="dyn"), "give one"),
        (dict(budget="1GiB"), "no larger than the device pool"),
        (dict(budget="lots"), "budget='lots'"),
        (dict(budget=0), "positive"),
        (dict(async_offload="yes"), "True or False"),
    ]:
        with pytest.raises((ValueError, TypeError), match=message):
            m.compile([tx], use_graph=True, **options)
    assert dev.pool.budget is None  # a refused compile sets nothing


def failing_copies(dev, fail_at, calls):
    """Make the device's `fail_at`-th queued copy fail (counting in `calls`)."""
    real = dev.queue_copy

    def queue_copy(dst, src, stream, label):
        calls.append(label)
        if len(calls) == fail_at:

            def broken(*_):
                raise OSError("injected: the link went down")

            stream.submit(broken)
            return
        real(dst, src, stream, label)

    dev.queue_copy = queue_copy


def test_a_failed_copy_is_a_clear_error_and_changes_nothing():
    data = batches((4, 1, 28, 28), 3)
    reference = train(cnn(), data, use_graph=True)
    m = cnn()
    dev = device.create_cpu_device("256MiB")
    _, states, _, tx, ty = train(m, data[:1], use_graph=True, dev=dev, offload="all")
    calls = []
    failing_copies(dev, 3, calls)
    tx.copy_from_numpy(data[1][0])
    ty.copy_from_numpy(data[1][1])
    with pytest.raises(TransferError, match="injected: the link went down"):
        m(tx, ty)
    for name, value in m.get_states().items():  # parameters, momentum, BatchNorm: untouched
        np.testing.assert_array_equal(tensor.to_numpy(value), states[name], err_msg=name)
    losses = [reference[0][0]]
    for x, y in data[1:]:  # the retry and the next step: the numbers of the reference
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        losses.append(tensor.to_numpy(m(tx, ty)[1])[0])
    assert losses == reference[0]


def test_no_wait_is_unbounded(monkeypatch):
    data = batches((4, 1, 28, 28), 1)
    m = cnn()
    dev = device.create_cpu_device("256MiB")
    _, _, _, tx, ty = train(m, data, use_graph=True, dev=dev, offload="all")
    real = dev.queue_copy

    def slow(dst, src, stream, label):
        stream.submit(time.sleep, 1.0)
        real(dst, src, stream, label)

    dev.queue_copy = slow
    monkeypatch.setattr(streams, "WAIT_TIMEOUT_S", 0.2)
    with pytest.raises(TimeoutError, match=r"waited 0 s for (copy-out|prefetch) of "):
        m(tx, ty)


def test_stress_random_delays_and_failures():
    """Hundreds of steps whose copies are randomly slow or fail: a failed step is retried;
    nothing deadlocks, and the losses are those of the run without injection."""
    data = batches((2, 1, 28, 28), 4)
    steps = 200
    reference = train(cnn(), [data[i % 4] for i in range(steps)], use_graph=True)[0]
    m = cnn()
    dev = device.create_cpu_device("256MiB")
    losses, _, _, tx, ty = train(m, data[:1], use_graph=True, dev=dev, offload="all")
    rng = random.Random(0)
    real = dev.queue_copy
    failures = 0

    def unreliable(dst, src, stream, label):
        if rng.random() < 0.3:
            stream.submit(time.sleep, rng.random() * 2e-3)
        if rng.random() < 0.02:

            def broken(*_):
                raise OSError("injected")

            stream.submit(broken)
        real(dst, src, stream, label)

    dev.queue_copy = unreliable
    for i in range(1, steps):
        tx.copy_from_numpy(data[i % 4][0])
        ty.copy_from_numpy(data[i % 4][1])
        while True:
            try:
                losses.append(tensor.to_numpy(m(tx, ty)[1])[0])
                break
            except TransferError:
                failures += 1
    assert failures > 0
    assert losses == reference
