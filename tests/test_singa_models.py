"""SINGA's own ResNet-50 and Xception (examples/singa/cnn/model, SINGA's files with only the
import lines changed) under nnmem's memory techniques: the planned peak of every technique is
the peak a real graph-mode step measures, byte for byte, and every technique leaves the losses
and parameters bit for bit as they are without it. Batch 1 at the models' own input sizes
(224 and 299: their final pooling windows need them)."""

import importlib.util
import pathlib

import numpy as np
import pytest

from nnmem import device, opt, tensor
from nnmem.planning import plan

MODELS = pathlib.Path(__file__).resolve().parent.parent / "examples" / "singa" / "cnn" / "model"
SETTINGS = [  # (recycle, recompute, offload): the order of StepPlan.techniques
    (False, "none", "none"),
    (True, "none", "none"),
    (True, "cost-aware", "none"),
    (True, "none", "all"),
    (True, "cost-aware", "all"),
]


def singa_model(name):
    spec = importlib.util.spec_from_file_location(f"singa_{name}", MODELS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if name == "resnet":
        return module.resnet50(num_channels=3, num_classes=10)
    return module.create_model(num_channels=3, num_classes=10)


def train(name, recycle, recompute, offload, steps=1):
    m = singa_model(name)
    shape = (1, 3, m.input_size, m.input_size)
    dev = device.create_cpu_device("3GiB")  # the baseline (recycling off) of Xception: 1.2 GiB
    dev.SetRandSeed(0)
    dev.recycle = recycle
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx, ty = tensor.PlaceHolder(shape, dev), tensor.PlaceHolder((1,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True, recompute=recompute, offload=offload)
    rng = np.random.default_rng(0)
    losses = []
    for step in range(steps):
        tx.copy_from_numpy(rng.random(shape, dtype=np.float32))
        ty.copy_from_numpy(np.array([step % 10], np.int32))
        _, loss = m(tx, ty, "plain", None)
        losses.append(tensor.to_numpy(loss).copy())
    params = {k: tensor.to_numpy(v) for k, v in m.get_params().items()}
    return dev.memory_stats()["allocated_bytes.peak"], losses, params


@pytest.mark.parametrize("name", ["resnet", "xceptionnet"])
def test_planned_peak_is_measured_and_every_technique_changes_no_number(name):
    m = singa_model(name)
    planned = plan(m, (1, 3, m.input_size, m.input_size), recompute="cost-aware")
    runs = [train(name, *setting) for setting in SETTINGS]
    for technique, (peak, _, _) in zip(planned.techniques, runs, strict=True):
        assert technique.peak_bytes == peak, technique.technique
    _, reference_losses, reference_params = runs[1]
    for setting, (_, losses, params) in zip(SETTINGS, runs):
        np.testing.assert_array_equal(np.concatenate(losses), np.concatenate(reference_losses))
        for k, v in reference_params.items():
            np.testing.assert_array_equal(params[k], v, err_msg=f"{setting}: {k}")
    baseline, liveness, recompute, offload, _ = planned.techniques
    assert baseline.peak_bytes > liveness.peak_bytes > offload.peak_bytes
