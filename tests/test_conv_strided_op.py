"""Conv2d's stride-2 3x3 and 1x1 paths (kernels/cpu/conv3x3s2.py, conv1x1.py): their gradients
against finite differences, and "auto" on a CPU timing them first and sizing its workspace for
them."""

import numpy as np
import pytest
from gradcheck import check_gradients

from nnmem import autograd, device, tensor
from nnmem.ops import conv as conv_ops

rng = np.random.default_rng(7)


@pytest.mark.parametrize(
    "algorithm,kernel,stride,padding",
    [("conv3x3s2", 3, 2, 1), ("conv1x1", 1, 2, 0), ("conv1x1", 1, (1, 2), 0), ("conv1x1", 1, 1, 0)],
)
def test_gradients(algorithm, kernel, stride, padding):
    """Linear in each input: central differences with eps = 1e-3 have no truncation error and
    little rounding (test_gradients.py's conv3x3 check says why the tolerances are tight)."""
    check_gradients(
        lambda x, w, b: autograd.conv2d(x, w, b, stride, padding, algorithm),
        rng.standard_normal((2, 3, 7, 6)),
        rng.standard_normal((4, 3, kernel, kernel)),
        rng.standard_normal(4),
        eps=1e-3,
        rtol=1e-8,
        atol=1e-10,
    )


def test_another_geometry_is_refused():
    x, w = (
        tensor.from_numpy(rng.standard_normal((1, 2, 5, 5))),
        tensor.from_numpy(rng.standard_normal((3, 2, 3, 3))),
    )
    with pytest.raises(ValueError, match="3x3 filters with stride 2 and padding 1"):
        autograd.conv2d(x, w, None, 1, 1, "conv3x3s2")
    with pytest.raises(ValueError, match="1x1 filters without padding, not 3x3"):
        autograd.conv2d(x, w, None, 1, 0, "conv1x1")
    with pytest.raises(ValueError, match="for group=1"):
        autograd.conv2d(x, tensor.from_numpy(rng.standard_normal((2, 1, 3, 3))), None, 2, 1,
                        "conv3x3s2", 2)  # fmt: skip


@pytest.mark.parametrize(
    "channels,kernel,stride,first",
    [
        (8, 3, 2, "conv3x3s2"),
        (256, 3, 2, "gemm"),
        (8, 1, 2, "conv1x1"),
        (256, 1, 2, "conv1x1"),
        (8, 1, 1, "conv1x1"),
    ],
)
def test_auto_times_the_specialised_kernels_first(monkeypatch, channels, kernel, stride, first):
    """On a CPU, "auto" times conv3x3s2 first (the one kept on a near tie, and the one its
    workspace is sized for) up to conv_geometry's CONV3X3_FIRST_UP_TO channels, gemm above,
    and conv1x1 at any width (with stride 1 in an empty workspace: it needs none); the
    specialised kernel is a candidate of every pass, and the choice gives the direct kernel's
    numbers (float32)."""
    orders = []
    real = conv_ops._time_candidates
    monkeypatch.setattr(conv_ops, "BENCHMARKED", {})
    monkeypatch.setattr(
        conv_ops, "_time_candidates", lambda d, c, a: orders.append(list(c)) or real(d, c, a)
    )
    monkeypatch.setattr(autograd, "training", True)
    dev = device.create_cpu_device("64MiB")
    pad = kernel // 2
    xs, ws = (
        rng.standard_normal(s, dtype=np.float32)
        for s in ((2, channels, 6, 6), (4, channels, kernel, kernel))
    )
    x, w = (
        tensor.Tensor(a.shape, dev, requires_grad=True, stores_grad=True).copy_from_numpy(a)
        for a in (xs, ws)
    )
    op = conv_ops.Conv2d((stride, stride), (pad, pad))
    y = op(x, w)
    dict(autograd.backward(y))
    special = "conv1x1" if kernel == 1 else "conv3x3s2"
    assert len(orders) == 3 and all(o[0] == first and special in o for o in orders), orders
    if (kernel, stride) == (1, 1):
        assert op.smallest_workspace_bytes("backward filter", 2, np.float32) == 0
    want = conv_ops.conv2d(*(tensor.from_numpy(a) for a in (xs, ws)), None, stride, pad, "direct")
    np.testing.assert_allclose(tensor.to_numpy(y), tensor.to_numpy(want), rtol=1e-4, atol=1e-4)
