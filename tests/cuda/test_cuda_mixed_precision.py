"""Mixed precision on the CUDA device (nnmem/optim/mixed_precision.py): float16 kernels, float32
masters, the overflow count read back from the GPU, a skipped step undone; graph mode, as the
CPU device trains it (a small MLP: the simulator runs every thread in Python)."""

import numpy as np
import pytest
from cuda_testutil import needs_device

from nnmem import device, opt, tensor
from nnmem.models import create_model

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]


def train(dev, steps=4, overflow_at=1):
    dev.SetRandSeed(0)
    m = create_model("mlp", hidden=(8, 8))
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx = tensor.Tensor((2, 1, 4, 4), dev)
    ty = tensor.Tensor((2,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True, precision="float16")
    x = np.random.default_rng(0).random((2, 1, 4, 4)).astype(np.float32)
    y = np.array([3, 7], np.int32)
    losses, params = [], []
    for i in range(steps):
        bad = x.copy()
        bad[0, 0, 0, 0] = np.inf if i == overflow_at else bad[0, 0, 0, 0]
        tx.copy_from_numpy(bad)
        ty.copy_from_numpy(y)
        _, loss = m(tx, ty)
        losses.append(float(tensor.to_numpy(loss)[0]))
        params.append({n: tensor.to_numpy(p) for n, p in m.get_params().items()})
    return losses, params, m


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the inf input
def test_mixed_precision_trains_on_the_cuda_device_as_on_the_cpu():
    want, _, _ = train(device.create_cpu_device("64MiB"))
    got, params, m = train(device.create_cuda_gpu("64MiB"))
    np.testing.assert_allclose(got, want, rtol=5e-3, equal_nan=True)
    scaler = m.optimizer.loss_scaler
    assert scaler.skipped_steps == 1 and scaler.scale == 2.0**14  # the overflow halved it
    for name in params[0]:  # the skipped step (the second) changed no parameter
        np.testing.assert_array_equal(params[1][name], params[0][name])
        assert params[0][name].dtype == np.float16
    assert any(not np.array_equal(params[3][n], params[2][n]) for n in params[0])
    assert all(t.dtype == np.float32 for t in scaler.masters.values())
