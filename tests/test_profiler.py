"""SINGA's time profile (nnmem/devices/profiler.py): its figures are per profiled step and add
up to the step."""

import time

from nnmem import device, opt, tensor
from nnmem.graph.costs import flops
from nnmem.models import create_model
from tests.training import batches


def _profiled(use_graph, before, profiled, skip=0):
    """A CNN trained `before` steps, then `profiled` more with the profiler on (per operation);
    returns (device, compiled step or None, wall seconds of the profiled steps)."""
    m = create_model("cnn")
    dev = device.create_cpu_device("64MiB")
    m.set_optimizer(opt.SGD(lr=0.1))
    tx, ty = tensor.PlaceHolder((8, 1, 28, 28), dev), tensor.PlaceHolder((8,), dev, tensor.int32)
    m.compile([tx], use_graph=use_graph)
    data = batches((8, 1, 28, 28), before + profiled)
    wall = 0.0
    for i, (x, y) in enumerate(data):
        if i == before:
            dev.SetVerbosity(2)
            dev.SetSkipIteration(skip)
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        start = time.perf_counter()
        m(tx, ty)
        if i >= before:
            wall += time.perf_counter() - start
    step = m.compiled_step(tx, ty) if use_graph else None
    return dev, step, wall


def test_a_profile_divides_by_the_steps_it_profiled_and_adds_up_to_them():
    dev, step, wall = _profiled(use_graph=True, before=3, profiled=4)
    profiler = dev.profiler
    assert profiler.steps == 4  # not the device's 7 iterations
    assert "over 4 profiled step(s)" in dev.time_profile_table()
    # every replayed node ran once per profiled step
    calls = sum(c for _, c, _ in profiler.seconds.values())
    assert calls == 4 * sum(1 for i in step.order if step.nodes[i].fn is not None)
    # the rows (kernels, and the time between them) are the steps' wall time, which the test's
    # own clock brackets
    kernels = sum(s for s, _, _ in profiler.seconds.values())
    assert kernels <= profiler.step_seconds <= wall
    # the flops per step are the convolution and product passes of the step, each counted once
    expected = sum(flops(step.nodes[i]) for i in step.order)
    counted = sum(f for _, _, f in profiler.seconds.values()) / profiler.steps
    assert expected > 0 and abs(counted - expected) <= 1e-9 * expected
    table = dev.time_profile_table()
    assert "(between kernels)" in table and "GFLOP/s" in table


def test_skipped_iterations_count_from_the_device_start_as_in_singa():
    dev, _, _ = _profiled(use_graph=False, before=0, profiled=5, skip=2)
    assert dev.profiler.steps == 3


def test_kernel_calls_outside_a_step_are_listed_apart():
    dev = device.create_cpu_device("16MiB")
    dev.SetVerbosity(1)
    x = tensor.from_numpy(batches((2, 4), 1)[0][0], dev)
    tensor.to_numpy(x + x)
    assert dev.profiler.steps == 0 and dev.profiler.outside
    table = dev.time_profile_table()
    assert "no step profiled" in table and "outside any step" in table
