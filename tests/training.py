"""Helpers for tests that train a few steps and compare runs bit for bit."""

import numpy as np

from nnmem import device, opt, tensor


def batches(shape, n, seed=0, classes=10):
    """`n` random (images, class ids) batches of `shape`."""
    rng = np.random.default_rng(seed)
    return [
        (rng.random(shape, dtype=np.float32), rng.integers(0, classes, shape[0]).astype(np.int32))
        for _ in range(n)
    ]


def train(
    m,
    data,
    use_graph,
    sequential=False,
    optimizer=None,
    pool="256MiB",
    seed=0,
    dev=None,
    **compile_options,
):
    """Train model `m` on `data` (on `dev`, default a new CPU device of `pool` bytes), compiled
    with `compile_options` (recompute, offload, budget...); returns (losses, final states,
    device, tx, ty)."""
    dev = dev or device.create_cpu_device(pool)
    dev.SetRandSeed(seed)
    m.set_optimizer(optimizer or opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    tx = tensor.PlaceHolder(data[0][0].shape, dev)
    ty = tensor.PlaceHolder(data[0][1].shape, dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph, sequential=sequential, **compile_options)
    losses = []
    for x, y in data:
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        _, loss = m(tx, ty)
        losses.append(tensor.to_numpy(loss)[0])
    states = {k: tensor.to_numpy(v) for k, v in m.get_states().items()}
    return losses, states, dev, tx, ty


def assert_identical(a, b):
    """Two `train` results have the same losses and states, bit for bit."""
    assert a[0] == b[0], "losses differ"
    for k in a[1]:
        np.testing.assert_array_equal(a[1][k], b[1][k], err_msg=k)
