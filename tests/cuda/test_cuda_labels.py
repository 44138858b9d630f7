"""Every form of labels the CPU device trains with, the CUDA device trains with, with the CPU's
numbers: class ids (int32, int64, SINGA's (N, 1) column) and one-hot rows (int32 as SINGA's
Model documentation makes them, int64, float32, float64), eagerly and in graph mode. On one
device every form gives the numbers of int32 class ids. Run on a GPU or on the CUDA simulator
(NUMBA_ENABLE_CUDASIM=1, in a pytest process of its own): the model is one Linear layer."""

import functools

import numpy as np
import pytest
from cuda_testutil import needs_device

from nnmem import device, layer, model, opt, tensor

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]

BATCH, CLASSES, STEPS = 4, 3, 2


def class_ids(dtype):
    return lambda ids: ids.astype(dtype)


def column(dtype):
    return lambda ids: ids.astype(dtype).reshape(-1, 1)


def one_hot(dtype):
    return lambda ids: np.eye(CLASSES, dtype=dtype)[ids]


#: label form -> how its labels are made from class ids (their dtype is the tensor's)
FORMS = {
    "int32 class ids": class_ids(np.int32),
    "int32 column of class ids": column(np.int32),
    "int64 class ids": class_ids(np.int64),
    "int32 one-hot rows": one_hot(np.int32),
    "int64 one-hot rows": one_hot(np.int64),
    "float32 one-hot rows": one_hot(np.float32),
    "float64 one-hot rows": one_hot(np.float64),
}


class Linear(model.Model):
    def __init__(self):
        super().__init__()
        self.flatten, self.linear = layer.Flatten(), layer.Linear(CLASSES)
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.linear(self.flatten(x))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def train(dev, form, use_graph):
    """Losses and final parameters of STEPS SGD steps on `dev`, labels given in `form`, the
    way SINGA's Model documentation feeds them: ty = tensor.Tensor(shape, dev, dtype)."""
    rng = np.random.default_rng(0)
    dev.SetRandSeed(0)
    m = Linear()
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    make_labels = FORMS[form]
    labels = make_labels(np.zeros(BATCH, np.int64))
    tx = tensor.Tensor((BATCH, 1, 2, 2), dev, tensor.float32)
    ty = tensor.Tensor(labels.shape, dev, labels.dtype)
    m.compile([tx], is_train=True, use_graph=use_graph, sequential=False)
    losses = []
    for _ in range(STEPS):
        tx.copy_from_numpy(rng.standard_normal(tx.shape).astype(np.float32))
        ty.copy_from_numpy(make_labels(rng.integers(0, CLASSES, BATCH)))
        _, loss = m(tx, ty)
        losses.append(tensor.to_numpy(loss)[0])
    return losses, {k: tensor.to_numpy(v) for k, v in m.get_params().items()}


@functools.cache
def with_class_ids(kind, use_graph):
    """train() with int32 class ids on a new device of `kind`: what every form must give."""
    dev = device.create_cuda_gpu("1MiB") if kind == "cuda" else device.create_cpu_device("1MiB")
    return train(dev, "int32 class ids", use_graph)


def assert_identical(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    for key, value in b[1].items():
        np.testing.assert_array_equal(a[1][key], value, err_msg=key)


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("form", FORMS)
def test_the_cuda_device_trains_with_every_label_form_of_the_cpu(form, use_graph):
    on_cpu = train(device.create_cpu_device("1MiB"), form, use_graph)
    on_gpu = train(device.create_cuda_gpu("1MiB"), form, use_graph)
    np.testing.assert_allclose(on_gpu[0], on_cpu[0], rtol=1e-5, atol=1e-6)
    for key, value in on_cpu[1].items():
        np.testing.assert_allclose(on_gpu[1][key], value, rtol=1e-5, atol=1e-6, err_msg=key)
    assert_identical(on_cpu, with_class_ids("cpu", use_graph))
    assert_identical(on_gpu, with_class_ids("cuda", use_graph))
