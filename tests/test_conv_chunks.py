"""A convolution's numbers never depend on its workspace: every pass of every algorithm gives
the same bits with one sample group's workspace, a little more, and the whole batch's, and a
model trained under a small workspace cap (offload="dyn" lowers it) matches the model trained
without one, bit for bit, as long as the cap keeps Conv2d.smallest_workspace_bytes."""

import numpy as np
import pytest
from training import assert_identical, batches, train

import nnmem.kernels.cpu as K
from nnmem import autograd, device, tensor
from nnmem.kernels import sizes
from nnmem.models import create_model
from nnmem.ops import conv as conv_ops

N = 7  # odd: the last sample group is smaller than the others
PASSES = ("forward", "backward data", "backward filter")
# (C, H = W, O, kernel, stride, padding): every one has sample groups smaller than the batch
# (gemm: 1024 columns, 2 samples of 24x24 outputs, 4 of 18x18, 1 of 32x32; conv3x3's backward
# filter: 2048 elements, 3 padded planes of 24x24), so that its workspaces cut the batch into
# chunks of different sizes, some not a whole number of groups
GEOMETRIES = {
    "3x3 pad 1, few filters": (3, 24, 4, 3, 1, 1),
    "3x3 pad 1, many filters": (16, 24, 40, 3, 1, 1),
    "5x5 stride 2": (4, 35, 6, 5, 2, 2),
    "1x1": (12, 32, 20, 1, 1, 0),
}


def passes(geometry, dtype):
    """(algorithm, pass, run, output shape, elements per sample, samples per group) for every
    pass of the geometry's workspace algorithms, run(out, workspace) on fixed random arrays of
    a batch of N."""
    c, h, o, k, s, p = geometry
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, c, h, h)).astype(dtype)
    w = rng.standard_normal((o, c, k, k)).astype(dtype)
    _, _, oh, ow = sizes.conv2d_output_shape(N, c, h, h, o, k, k, s, s, p, p)
    dy = rng.standard_normal((N, o, oh, ow)).astype(dtype)
    kernels = {
        "gemm": (
            (K.conv2d_forward_gemm, K.conv2d_backward_data_gemm, K.conv2d_backward_filter_gemm),
            (s, s, p, p),
            sizes.conv2d_gemm_workspace_per_sample(c, h, h, o, k, k, s, s, p, p),
            (sizes.conv2d_gemm_sample_group(N, oh, ow, "cpu"),) * 3,
        )
    }
    if sizes.conv3x3_applies(k, k, s, s, p, p):
        kernels["conv3x3"] = (
            (K.conv3x3_forward, K.conv3x3_backward_data, K.conv3x3_backward_filter),
            (),
            sizes.conv3x3_workspace_per_sample(c, o, h, h),
            (1, 1, sizes.conv3x3_filter_sample_group(N, h, h)),
        )
    arguments = {"forward": (x, w, dy.shape), "backward data": (dy, w, x.shape)}
    arguments["backward filter"] = (dy, x, w.shape)
    for algorithm, (runs, scalars, per_sample, groups) in kernels.items():
        for name, kernel, group in zip(PASSES, runs, groups):
            a, b, shape = arguments[name]

            def run(out, ws, kernel=kernel, a=a, b=b, scalars=scalars):
                kernel(out, a, b, ws, *scalars)

            yield algorithm, name, run, shape, per_sample, group


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GEOMETRIES.values(), ids=GEOMETRIES.keys())
def test_every_pass_gives_the_same_bits_in_every_workspace(geometry, dtype):
    """Workspaces of 1, 2 and 3 samples (raised to one sample group where a group is more: a
    smaller workspace is refused, tests/kernels), one group and one sample more (not a whole
    number of groups), and the whole batch: np.array_equal."""
    differ = []
    for algorithm, name, run, shape, per_sample, group in passes(geometry, dtype):
        assert group < N, "the test needs several sample groups in the batch"
        outputs = {}
        for samples in sorted({max(s, group) for s in (1, 2, 3)} | {group + 1, N}):
            out = np.full(shape, np.nan, dtype)
            run(out, np.full(samples * per_sample, np.nan, dtype))
            outputs[samples] = out
        differ += [
            f"{algorithm} {name}, {samples} samples"
            for samples, out in outputs.items()
            if not np.array_equal(out, outputs[N])
        ]
    assert not differ, f"differ from the whole batch's workspace: {differ}"


@pytest.fixture
def convolutions(monkeypatch):
    """The Conv2d operators the test makes, in order (their forward lists them), and an empty
    record of "auto"'s choices: every pass times its candidates anew."""
    made = []
    forward = conv_ops.Conv2d.forward

    def listed(op, *args):
        made.append(op)
        return forward(op, *args)

    monkeypatch.setattr(conv_ops.Conv2d, "forward", listed)
    monkeypatch.setattr(conv_ops, "BENCHMARKED", {})
    return made


@pytest.fixture
def timings(monkeypatch):
    """The shapes of the arrays (out, workspace, a, b) of every timing of "auto"'s candidates,
    in order, each with its pass's name (the key "auto" records its choice under)."""
    shapes_timed = []
    real = conv_ops._time_candidates

    def timed(device, candidates, arrays):
        shapes_timed.append(tuple(a.shape for a in arrays))
        return real(device, candidates, arrays)

    monkeypatch.setattr(conv_ops, "_time_candidates", timed)
    return shapes_timed


def smallest_cap(convolutions):
    """The smallest workspace cap that keeps the numbers of every pass of these convolutions."""
    return max(op.smallest_workspace_bytes(p, N, np.float32) for op in convolutions for p in PASSES)


def resnet_steps(data, cap=None):
    """train's result for ResNet-8 (the smallest) on `data`, in graph mode, every convolution's
    "auto" workspace capped at `cap` bytes (None: as free memory allows)."""
    dev = device.create_cpu_device("256MiB")
    with dev.limit_workspaces(cap):
        return train(create_model("resnet", depth=8), data, use_graph=True, dev=dev)


def test_a_small_workspace_cap_changes_no_number(convolutions, timings):
    """ResNet-8, batch 7 of 32x32, 3 steps: under the smallest cap that keeps every pass's
    numbers, workspaces do not grow (the gemm passes hold one group already), no pass times
    its candidates again ("auto" remembers its choice per geometry, not per workspace), and
    the losses and parameters are the uncapped run's, bit for bit."""
    data = batches((N, 3, 32, 32), 3)
    uncapped = resnet_steps(data)
    timed = len(timings)
    capped = resnet_steps(data, smallest_cap(convolutions))
    peak = [run[2].memory_stats()["allocated_bytes.peak"] for run in (uncapped, capped)]
    assert peak[1] <= peak[0]
    assert len(timings) == timed
    assert_identical(uncapped, capped)


def test_auto_times_its_candidates_in_the_same_workspace_under_any_cap(convolutions, timings):
    """A process that meets a pass first under a cap times the same candidates in the same
    workspace as one that meets it without: its choice does not depend on the cap either."""
    data = batches((N, 3, 32, 32), 1)
    resnet_steps(data)
    uncapped = list(timings)
    conv_ops.BENCHMARKED.clear()
    timings.clear()
    resnet_steps(data, smallest_cap(convolutions))
    assert timings == uncapped


def test_auto_times_its_candidates_on_one_sample_group(convolutions, timings):
    """Every candidate of a pass is timed on the same work, one sample group of the batch in one
    group's workspace: a data pass's group is one sample. Timed on the whole batch in one
    group's workspace, a workspace algorithm ran it one small chunk at a time while direct ran
    it at once, and on 16 cores direct was kept where it took 3.7 ms in the step."""
    resnet_steps(batches((N, 3, 32, 32), 1))
    passes = [key[1] for key in conv_ops.BENCHMARKED]  # in the order they were timed
    assert len(timings) == len(passes) > 0
    for pass_name, (out, workspace, a, b) in zip(passes, timings):
        samples = a[0]  # x or dy: the batch axis
        assert samples == (b[0] if pass_name == "backward filter" else out[0])
        if pass_name != "backward filter":
            assert samples == 1, pass_name


def test_direct_is_a_candidate_only_where_no_specialised_algorithm_applies(monkeypatch):
    """ResNet-8's passes (3x3 at strides 1 and 2, 1x1) time their specialised kernels and the
    gemm, never direct; a 5x5 convolution of stride 2 times the gemm and direct."""
    monkeypatch.setattr(conv_ops, "BENCHMARKED", {})
    timed = []
    real = conv_ops._time_candidates
    monkeypatch.setattr(
        conv_ops,
        "_time_candidates",
        lambda d, c, arrays: timed.append(set(c)) or real(d, c, arrays),
    )
    resnet_steps(batches((N, 3, 32, 32), 1))
    assert timed and all("direct" not in names for names in timed)
    assert set().union(*timed) == {"conv3x3", "conv3x3s2", "conv1x1", "gemm"}
    timed.clear()
    dev, rng = device.create_cpu_device("64MiB"), np.random.default_rng(0)
    x, W = (
        tensor.Tensor(shape, dev, requires_grad=True, stores_grad=True).copy_from_numpy(
            rng.standard_normal(shape).astype(np.float32)
        )
        for shape in ((N, 4, 35, 35), (6, 4, 5, 5))
    )
    autograd.training = True
    dict(autograd.backward(conv_ops.conv2d(x, W, None, 2, 2)))
    assert timed == [{"gemm", "direct"}] * 3


@pytest.mark.parametrize("name", ["3x3 pad 1, few filters", "5x5 stride 2"])
def test_no_cap_takes_a_pass_below_its_smallest_workspace(convolutions, name):
    """Under a cap of Conv2d.smallest_workspace_bytes a pass has a workspace ("auto" times its
    candidates: its choice is recorded), and one byte under it too: a cap never takes a pass
    below one sample group (that would run it direct, with other last bits); only free memory
    can (eagerly, a pool too full for one group)."""
    c, h, o, k, s, p = GEOMETRIES[name]
    rng = np.random.default_rng(0)

    def passes_with_a_workspace(cap):
        conv_ops.BENCHMARKED.clear()
        dev = device.create_cpu_device("64MiB")
        x, W = (
            tensor.Tensor(shape, dev, requires_grad=True, stores_grad=True).copy_from_numpy(
                rng.standard_normal(shape).astype(np.float32)
            )
            for shape in ((N, c, h, h), (o, c, k, k))
        )
        autograd.training = True
        with dev.limit_workspaces(cap):
            dict(autograd.backward(conv_ops.conv2d(x, W, None, s, p)))
        return {key[1] for key in conv_ops.BENCHMARKED}

    assert passes_with_a_workspace(None) == set(PASSES)
    op = convolutions[-1]
    for pass_name in PASSES:
        least = op.smallest_workspace_bytes(pass_name, N, np.float32)
        assert pass_name in passes_with_a_workspace(least)
        assert pass_name in passes_with_a_workspace(least - 1)
        assert pass_name in passes_with_a_workspace(0)
