"""Helpers for tests that train a few steps and compare runs bit for bit."""

import numpy as np

from nnmem import autograd, device, layer, model, opt, tensor
from nnmem.models import create_model


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


class Scaled(layer.Layer):
    """y = W * x elementwise, W starting at w0: backward from y (with ones) gives W the
    gradient x, exactly."""

    def __init__(self, w0):
        super().__init__()
        self.w0 = w0

    def initialize(self, x):
        self.W = tensor.Tensor(x.shape, x.device, x.dtype, stores_grad=True)
        self.W.copy_from_numpy(self.w0)

    def forward(self, x):
        return autograd.mul(self.W, x)


class GradientIsInput(model.Model):
    """A model whose parameter's gradient is its input: an optimizer's updates for given
    gradients, in whole training steps."""

    def __init__(self, w0):
        super().__init__()
        self.scaled = Scaled(w0)

    def forward(self, x):
        return self.scaled(x)

    def train_one_batch(self, x):
        y = self.forward(x)
        self.optimizer(y)
        return y


def train_on_gradients(dev, optimizer, w0, grads, use_graph):
    """W (starting at w0, of w0's dtype) after one optimizer step per gradient on `dev`, in
    eager or graph mode. Returns (W, the model)."""
    m = GradientIsInput(w0)
    m.set_optimizer(optimizer)
    tx = tensor.PlaceHolder(w0.shape, dev, w0.dtype)
    m.compile([tx], is_train=True, use_graph=use_graph)
    for g in grads:
        tx.copy_from_numpy(g)
        m(tx)
    return tensor.to_numpy(m.scaled.W), m


def planned_step(name, shape, model_options=None, recycle=True, **compile_options):
    """The training step of zoo model `name` (`model_options` to create_model) on batches of
    `shape`, recorded and planned in graph mode on a planning device: offsets, no bytes, no
    kernel run. `recycle=False` plans the baseline; `compile_options` go to Model.compile
    (recompute, offload, sequential). Returns the CompiledStep."""
    dev = device.create_planning_device()
    dev.recycle = recycle
    m = create_model(name, **(model_options or {}))
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    tx = tensor.PlaceHolder(shape, dev)
    ty = tensor.PlaceHolder((shape[0],), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True, **compile_options)
    tx.set_value(0)  # written, so that reading them is allowed (a planning device allocates only)
    ty.set_value(0)
    m(tx, ty)
    return m.compiled_step(tx, ty)
