"""float16 as a storage dtype (nnmem/devices/half.py): half the bytes of every stored tensor,
float32 arithmetic inside each kernel call, the same numbers eagerly and in graph mode."""

import numpy as np
import pytest

from nnmem import device, opt, tensor
from nnmem.cli import main
from nnmem.models import create_model
from nnmem.planning import plan


def test_a_float16_step_plans_to_half_the_bytes_of_float32():
    peaks = {}
    for dtype in (np.float32, np.float16):
        # unfused: a float16 step does not fuse (graph/fuse.py says why), a float32 one does
        planned = plan(create_model("resnet", depth=8), (8, 3, 16, 16), dtype=dtype, fuse=False)
        peaks[dtype] = [t.peak_bytes for t in planned.techniques]
    for wide, half in zip(peaks[np.float32], peaks[np.float16]):
        assert half == pytest.approx(wide / 2, rel=0.02)


def test_nnmem_plan_takes_a_dtype(capsys):
    args = ["plan", "--model", "resnet", "--depth", "8", "--batch", "8", "--input", "3x16x16"]
    args.append("--no-fuse")  # a float16 step does not fuse (graph/fuse.py says why)
    liveness = {}
    for dtype in ("float32", "float16"):
        assert main(args + ["--dtype", dtype]) == 0
        row = next(r for r in capsys.readouterr().out.splitlines() if r.split()[0] == "liveness")
        value, unit = row.split()[1:3]
        liveness[dtype] = float(value) * {"KiB": 2**10, "MiB": 2**20}[unit]
    assert liveness["float16"] == pytest.approx(liveness["float32"] / 2, rel=0.03)


def train(dtype, use_graph, steps=4):
    dev = device.create_cpu_device("128MiB")
    dev.SetRandSeed(0)
    m = create_model("cnn")
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx = tensor.Tensor((8, 1, 28, 28), dev, dtype)
    ty = tensor.Tensor((8,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph)
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 1, 28, 28)).astype(dtype), rng.integers(0, 10, 8).astype(np.int32)
    losses = []
    for _ in range(steps):
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        _, loss = m(tx, ty)
        losses.append(float(tensor.to_numpy(loss)[0]))
    return losses, dev.memory_stats()["allocated_bytes.peak"], m


def test_float16_trains_eagerly_and_in_graph_mode_with_the_same_numbers():
    wide, wide_peak, _ = train(np.float32, use_graph=False)
    eager, eager_peak, m = train(np.float16, use_graph=False)
    graph, _, _ = train(np.float16, use_graph=True)
    assert eager == graph
    np.testing.assert_allclose(eager, wide, rtol=0.02)  # float16 rounding at every tensor
    assert eager[-1] < eager[0]
    assert eager_peak < 0.55 * wide_peak
    assert all(p.dtype == np.float16 for p in m.get_params().values())


def test_as_type_and_sgd_dtype():
    dev = device.create_cpu_device("1MiB")
    t = tensor.from_numpy(np.array([1.5, -2.25], np.float32), dev)
    half = t.as_type(tensor.float16)
    assert half.dtype == np.float16 and half.memsize() == 4
    np.testing.assert_array_equal(tensor.to_numpy(half.as_type(tensor.float32)), [1.5, -2.25])
    np.testing.assert_array_equal(tensor.to_numpy(t.as_type("int")), [1, -2])
    assert opt.SGD(lr=0.1, dtype=tensor.float16) is not None
