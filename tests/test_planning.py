"""Planning on shapes alone gives the figures a real run measures, byte for byte."""

import re

import numpy as np
import pytest

from nnmem import device, opt, tensor
from nnmem.cli import main
from nnmem.measure import measure_step
from nnmem.models import create_model
from nnmem.planning import plan, smallest_pool

ZOO = {
    "cnn": ((4, 1, 28, 28), {}),
    "mlp": ((4, 1, 8, 8), {}),
    "resnet": ((2, 3, 16, 16), {"depth": 8}),
    "alexnet": ((2, 3, 67, 67), {"width": 1 / 16, "num_classes": 10}),
    "vgg16": ((2, 3, 32, 32), {"width": 1 / 16, "num_classes": 10}),
    "densenet": ((2, 3, 16, 16), {"layers_per_block": 2, "blocks": 2}),
    "inception": ((2, 3, 16, 16), {"width": 0.25}),
}


def measured_peak(name, recycle, recompute, offload="none"):
    shape, kwargs = ZOO[name]
    dev = device.create_cpu_device("256MiB")
    dev.recycle = recycle
    m = create_model(name, **kwargs)
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx, ty = tensor.PlaceHolder(shape, dev), tensor.PlaceHolder((shape[0],), dev, tensor.int32)
    m.compile([tx], use_graph=True, recompute=recompute, offload=offload)
    tx.copy_from_numpy(np.random.default_rng(0).random(shape, dtype=np.float32))
    ty.copy_from_numpy(np.zeros(shape[0], np.int32))
    m(tx, ty)
    m(tx, ty)
    return dev.memory_stats()["allocated_bytes.peak"]


@pytest.mark.parametrize("name", sorted(ZOO))
def test_planned_peak_is_the_measured_peak(name):
    shape, kwargs = ZOO[name]
    planned = plan(create_model(name, **kwargs), shape, recompute="cost-aware")
    settings = [
        (False, "none", "none"),
        (True, "none", "none"),
        (True, "cost-aware", "none"),
        (True, "none", "all"),
        (True, "cost-aware", "all"),
    ]
    for technique, setting in zip(planned.techniques, settings, strict=True):
        assert technique.peak_bytes == measured_peak(name, *setting), technique
        assert technique.timeline.peak == technique.peak_bytes  # what a plot's legend says
    baseline, liveness, recompute, offload, all_three = planned.techniques
    assert baseline.peak_bytes > liveness.peak_bytes >= recompute.peak_bytes
    assert liveness.peak_bytes >= offload.peak_bytes
    assert offload.host_bytes > 0 and all_three.host_bytes > 0


def test_a_planned_timeline_peaks_with_its_arena_not_at_its_lower_bound():
    """A plan's table and its plot's legend print one peak: persistent + arena, the pool's
    peak, which is above the curve's top (persistent + lower bound) where the layout leaves
    gaps between slots."""
    pytest.importorskip("matplotlib", reason="plotting needs matplotlib")
    from nnmem.memory.timeline import plot_timelines

    # Inception on 2 MNIST images: the recompute plan's greedy layout lands above its bound
    planned = plan(create_model("inception", num_channels=1), (2, 1, 28, 28), offload="none")
    recompute = planned.techniques[2]
    timeline = recompute.timeline
    assert recompute.peak_bytes > recompute.lower_bound_bytes  # this layout has gaps
    assert timeline.peak == recompute.peak_bytes
    assert max(timeline.bytes) == recompute.lower_bound_bytes
    legend = plot_timelines([t.timeline for t in planned.techniques]).axes[0].get_legend()
    texts = [text.get_text() for text in legend.get_texts()]
    for technique, text in zip(planned.techniques, texts, strict=True):
        assert f"(peak {technique.peak_bytes / 2**20:.1f} MiB" in text, text
    assert f"{recompute.lower_bound_bytes / 2**20:.1f} MiB live" in texts[2]


def test_planned_baseline_rises_as_a_device_without_recycling_measures():
    """The baseline (recycling off) keeps each block from its first write to the end of the
    step: its planned curve rises through the step, as the pool of an eager step with
    recycling off does, to the same peak; it is not the peak all along."""
    shape = (4, 1, 28, 28)
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    measured = measure_step(lambda: create_model("cnn"), x, np.zeros(4, np.int32), "64MiB")[0]
    eager = measured["no recycling"]
    # unfused: the blocks the eager step makes (fusion removes some: tests/test_fuse.py)
    baseline = plan(create_model("cnn"), shape, sequential=True, offload="none", fuse=False)
    baseline = baseline.techniques[0]
    planned = baseline.timeline
    assert planned.names == eager.names  # serial order: the order eager runs the kernels
    assert planned.peak == eager.peak == baseline.peak_bytes
    assert planned.bytes == sorted(planned.bytes) and planned.bytes[0] < planned.peak / 2
    # the results (output and loss) are allocated before a graph step runs: a few hundred bytes
    assert all(0 <= p - e <= 1024 for p, e in zip(planned.bytes, eager.bytes, strict=True))
    assert planned.live == sorted(planned.live) and planned.live[0] < planned.live[-1]


def test_planning_allocates_no_bytes_and_runs_nothing():
    planned = plan(create_model("resnet", depth=110), (64, 3, 32, 32))
    assert planned.techniques[0].peak_bytes > 2**30  # a baseline no 24 GiB test box could run
    assert planned.nodes > 900  # after fusion (1172 recorded)


def test_plan_rejects_malformed_shapes():
    with pytest.raises(ValueError, match="batch"):
        plan(create_model("mlp"), (0, 784))


def mlp():
    return create_model("mlp", hidden=(16,), num_classes=10)


def test_plan_takes_a_budget_as_text_as_compile_does():
    """offload="dyn" compared the text with a number (a TypeError)."""
    by_text = plan(mlp(), (4, 20), offload="dyn", budget="16MiB")
    by_number = plan(mlp(), (4, 20), offload="dyn", budget=16 * 2**20)
    assert [t.peak_bytes for t in by_text.techniques] == [
        t.peak_bytes for t in by_number.techniques
    ]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: plan(mlp(), (4, 20), offload=None), "plan(offload=None): choose one of"),
        (lambda: plan(mlp(), (4, 20), recompute=None), "plan(recompute=None): choose one of"),
        (lambda: plan(mlp(), (4, 20), budget="bogus"), "cannot read 'bogus' as a size"),
        (lambda: plan(mlp(), (4, 20), budget=0), "plan(budget=0): give a positive number"),
        (lambda: plan(mlp(), (4.7, 20)), "the sizes must be whole numbers"),
        (lambda: smallest_pool(mlp(), (4, 20), offload="bogus"), "choose 'none', 'conv'"),
    ],
    ids=["offload-None", "recompute-None", "budget-text", "budget-0", "float-size", "pool-offload"],
)
def test_plan_refuses_arguments_it_would_misread(call, message):
    """None for a technique planned a row without it under its name; a float size was
    truncated; smallest_pool took any offload when eager."""
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_plan_refuses_a_model_compiled_before():
    """It compiles the model on a planning device of its own: a model planned or compiled
    before lives on another device (the error blamed two devices the user never made)."""
    model = mlp()
    plan(model, (4, 20))
    with pytest.raises(ValueError, match="was compiled already .* give a new, uninitialised"):
        plan(model, (8, 20))


def test_cli_plan_table_budget_and_searches(capsys):
    assert (
        main(
            [
                "plan",
                "--model",
                "resnet",
                "--depth",
                "20",
                "--batch",
                "8",
                "--input",
                "3x32x32",
                "--budget",
                "40MiB",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "baseline" in out and "liveness + recompute" in out
    assert "does not fit" in out and "  fits" in out
    assert (
        main(
            ["plan", "--model", "resnet", "--batch", "8", "--input", "3x32x32", "--budget", "1MiB"]
        )
        == 0
    )
    assert "no technique fits 1.0 MiB: the smallest peak reachable is" in capsys.readouterr().out
    assert (
        main(
            [
                "plan",
                "--model",
                "resnet",
                "--batch",
                "4",
                "--input",
                "3x32x32",
                "--budget",
                "10MiB",  # ResNet-44: a deeper answer only makes every probe slower
                "--find-depth",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    depth = int(out.split("deepest ResNet that fits 10.0 MiB: ")[1].split()[0])
    fits = plan(create_model("resnet", depth=depth), (4, 3, 32, 32)).best().peak_bytes
    deeper = plan(create_model("resnet", depth=depth + 6), (4, 3, 32, 32)).best().peak_bytes
    assert fits <= 10 * 2**20 < deeper
    assert (
        main(["plan", "--model", "cnn", "--input", "1x28x28", "--budget", "64MiB", "--find-batch"])
        == 0
    )
    assert "largest batch that fits 64.0 MiB:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["plan", "--model", "transformer"], "unknown model"),
        (["plan", "--input", "3xaxb"], "3x224x224"),
        (["plan", "--budget", "12 gigs"], "GiB"),
        (["plan", "--find-depth"], "--budget"),
        (["plan", "--model", "cnn", "--find-depth", "--budget", "1GiB"], "--model resnet"),
    ],
)
def test_cli_plan_bad_input_is_explained(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_layout_stacks_at_more_than_the_highest_position():
    """DenseNet on MNIST at batch 64: the peak-first orders at the highest position leave its
    liveness layout 122 KiB above the bound; at the second highest they meet it
    (memory/layout.py's PEAKS)."""
    model = create_model("densenet", num_channels=1)
    liveness = plan(model, (64, 1, 28, 28), offload="none").techniques[1]
    assert liveness.peak_bytes == liveness.lower_bound_bytes
