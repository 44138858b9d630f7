"""Layers: SINGA's constructor signatures, lazy initialisation, dotted names, shape errors."""

import numpy as np
import pytest

from nnmem import autograd, device, layer, model, tensor


@pytest.fixture
def dev():
    d = device.create_cpu_device("64MiB")
    d.SetRandSeed(0)
    return d


def batch(dev, *shape):
    return tensor.from_numpy(np.random.default_rng(0).random(shape, dtype=np.float32), dev)


class Block(layer.Layer):
    def __init__(self):
        super().__init__()
        self.conv1 = layer.Conv2d(4, 3, padding=1)
        self.bn1 = layer.BatchNorm2d()
        self.relu = layer.ReLU()

    def forward(self, x):
        return self.relu(self.bn1(self.conv1(x)))


class Net(model.Model):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(3)

    def forward(self, x):
        return self.fc(self.flatten(self.block(x)))


def test_dotted_names_params_and_states(dev):
    net = Net()
    net.forward(batch(dev, 2, 1, 4, 4))
    assert list(net.get_params()) == [
        "block.conv1.W",
        "block.conv1.b",
        "block.bn1.scale",
        "block.bn1.bias",
        "fc.W",
        "fc.b",
    ]  # registration order
    states = net.get_states()
    assert {"block.bn1.running_mean", "block.bn1.running_var"} <= set(states)
    assert net.get_params()["block.conv1.W"].shape == (4, 1, 3, 3)
    assert net.get_params()["fc.W"].shape == (64, 3)


def test_set_params_checks_everything_before_writing(dev):
    net = Net()
    net.forward(batch(dev, 2, 1, 4, 4))
    before = {k: tensor.to_numpy(v) for k, v in net.get_params().items()}
    bad = {"fc.b": np.ones(3, np.float32), "fc.W": np.ones((5, 5), np.float32)}
    with pytest.raises(ValueError, match="fc.W"):
        net.set_params(bad)
    with pytest.raises(KeyError, match="nope"):
        net.set_params({"nope": np.ones(1)})
    for k, v in net.get_params().items():
        np.testing.assert_array_equal(tensor.to_numpy(v), before[k])
    net.set_params({"fc.b": np.full(3, 2.0, np.float32)})
    np.testing.assert_array_equal(tensor.to_numpy(net.get_params()["fc.b"]), np.full(3, 2.0))


def test_singa_signatures(dev):
    x = batch(dev, 2, 3, 8, 8)
    a, b = layer.Conv2d(6, 3), layer.Conv2d(3, 6, 3, 2, 1)  # (out, k) and (in, out, k, stride, pad)
    assert a(x).shape == (2, 6, 6, 6)
    assert b(x).shape == (2, 6, 4, 4)
    assert layer.Linear(5)(batch(dev, 2, 7)).shape == (2, 5)
    assert layer.Linear(7, 5)(batch(dev, 2, 7)).shape == (2, 5)
    assert layer.MaxPool2d(2)(x).shape == (2, 3, 4, 4)  # stride defaults to the kernel
    assert layer.AvgPool2d(3, 1, 1)(x).shape == (2, 3, 8, 8)
    assert layer.Conv2d(3, 4, 3, activation="RELU")(x).creator is None  # inference: no graph


def test_shape_errors_name_the_layer_and_the_fix(dev):
    with pytest.raises(ValueError, match="declared 3 input channels"):
        layer.Conv2d(3, 6, 3)(batch(dev, 2, 1, 8, 8))
    conv = layer.Conv2d(4, 3)
    conv(batch(dev, 2, 1, 8, 8))
    with pytest.raises(ValueError, match=r"expected \(N, 1, H, W\)"):
        conv(batch(dev, 2, 2, 8, 8))
    with pytest.raises(ValueError, match="Flatten"):
        layer.Linear(3)(batch(dev, 2, 1, 4, 4))
    with pytest.raises(ValueError, match="does not fit"):
        layer.Conv2d(2, 5)(batch(dev, 1, 1, 3, 3))
    with pytest.raises(ValueError, match="pad_mode 'SAME'; use one of"):
        layer.Conv2d(2, 3, pad_mode="SAME")


def test_register_layers_names_list_members(dev):
    class Stack(layer.Layer):
        def __init__(self):
            super().__init__()
            self.layers = [layer.Linear(4), layer.Linear(2)]
            self.register_layers(*self.layers)

        def forward(self, x):
            for sub in self.layers:
                x = sub(x)
            return x

    s = Stack()
    s(batch(dev, 3, 5))
    assert set(s.get_params()) == {"Linear_0.W", "Linear_0.b", "Linear_1.W", "Linear_1.b"}


def test_dropout_batchnorm_follow_training_mode(dev):
    x = batch(dev, 4, 2, 3, 3)
    drop, bn = layer.Dropout(0.5), layer.BatchNorm2d(2)
    autograd.training = False
    assert drop(x) is x
    y_eval = tensor.to_numpy(bn(x))
    autograd.training = True
    dropped, kept = tensor.to_numpy(drop(x)), tensor.to_numpy(x) * 2  # scaled by 1/(1-0.5)
    assert 0 < (dropped == 0).sum() < dropped.size
    np.testing.assert_array_equal(dropped[dropped != 0], kept[dropped != 0])
    y_train = tensor.to_numpy(bn(x))
    np.testing.assert_allclose(y_train.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    assert not np.allclose(y_eval, y_train)
    assert not np.allclose(tensor.to_numpy(bn.running_mean), 0)  # updated in training
