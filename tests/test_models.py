"""The model zoo: every model trains, graph mode changes none of its numbers, the standard
networks have their published parameter counts, and deep ResNets build quickly."""

import gc

import numpy as np
import pytest
from training import assert_identical, batches, train

from nnmem import device, layer, tensor
from nnmem.models import MODELS, create_model
from nnmem.models.classifier import Classifier
from nnmem.models.resnet import cifar_stages, imagenet_stages, split_blocks

# Tiny forms of every zoo model: (name, input shape (batch 2), create_model kwargs).
TINY = {
    "alexnet": ("alexnet", (2, 3, 67, 67), {"width": 1 / 16, "num_classes": 10}),
    "vgg16": ("vgg16", (2, 3, 32, 32), {"width": 1 / 16, "num_classes": 10}),
    "resnet-cifar-bottleneck": (
        "resnet",
        (2, 3, 16, 16),
        {"depth": 11, "block": "bottleneck", "width": 0.5},
    ),
    "resnet-imagenet-basic": (
        "resnet",
        (2, 3, 32, 32),
        {"depth": 10, "stem": "imagenet", "width": 1 / 8},
    ),
    "resnet-imagenet-bottleneck": (
        "resnet",
        (2, 3, 32, 32),
        {"depth": 14, "stem": "imagenet", "block": "bottleneck", "width": 1 / 8},
    ),
    "densenet": ("densenet", (2, 3, 16, 16), {"growth": 4, "layers_per_block": 3, "blocks": 2}),
    "inception": ("inception", (2, 3, 16, 16), {"width": 1 / 16, "modules": 2}),
}


def test_every_model_is_registered_and_ignores_unknown_arguments():
    assert {"alexnet", "vgg16", "resnet", "densenet", "inception"} <= set(MODELS)
    for name in ("alexnet", "vgg16", "resnet", "densenet", "inception"):
        m = create_model(name, num_classes=5, num_channels=1, depth=20, hidden=(3,), nonsense=1)
        assert isinstance(m, Classifier)


@pytest.mark.parametrize("case", sorted(TINY))
def test_trains_and_graph_mode_changes_no_number(case):
    name, shape, kwargs = TINY[case]
    # Three steps on one batch: the loss must move because the parameters do.
    same = batches(shape, 1) * 3
    m = create_model(name, **kwargs)
    losses, states, dev, tx, _ = train(m, same, use_graph=False)
    assert np.isfinite(losses).all() and len(set(losses)) == 3, losses
    assert all(np.isfinite(v).all() for v in states.values())
    m.eval()
    logits = tensor.to_numpy(m(tx))
    assert logits.shape == (shape[0], 10) and np.isfinite(logits).all()

    data = batches(shape, 3, seed=1)
    eager = train(create_model(name, **kwargs), data, use_graph=False)
    for sequential in (True, False):
        graph = train(create_model(name, **kwargs), data, use_graph=True, sequential=sequential)
        assert_identical(eager, graph)


def test_layers_have_their_own_dotted_names():
    m = create_model("alexnet", width=1 / 16, num_classes=10)
    expected = [
        "conv1",
        "relu1",
        "lrn1",
        "pool1",
        "conv2",
        "relu2",
        "lrn2",
        "pool2",
        "conv3",
        "relu3",
        "conv4",
        "relu4",
        "conv5",
        "relu5",
        "pool5",
        "fc1",
        "relu6",
        "dropout1",
        "fc2",
        "relu7",
        "dropout2",
        "fc3",
    ]
    assert [n for n in m._layers if n in expected] == expected  # in SuperNeurons' order
    assert len({id(m._layers[n]) for n in expected}) == len(expected)
    assert isinstance(m.lrn1, layer.LRN)
    d = create_model("densenet", growth=2, layers_per_block=3, blocks=2)
    assert {"cat1", "cat2", "cat"} <= set(d.block1._layers) and "transition1" in d._layers
    i = create_model("inception", width=1 / 16, modules=2)
    assert isinstance(i.module1.cat, layer.Cat) and "pool1" in i._layers


def count_parameters(m, shape, pool="512MiB"):
    """Create the parameters with compile's dry run (no kernel runs, no activation memory)."""
    dev = device.create_cpu_device(pool)
    m.compile([tensor.PlaceHolder(shape, dev)], is_train=True)
    n = sum(p.size() for p in m.get_params().values())
    del m, dev
    gc.collect()
    return n


@pytest.mark.parametrize("depth,expected", [(18, 11_689_512), (50, 25_557_032)])
def test_imagenet_resnet_parameter_counts(depth, expected):
    # The count does not depend on the resolution (global pooling), so 32x32 dry-runs suffice.
    m = create_model("resnet", depth=depth, stem="imagenet", num_classes=1000)
    assert count_parameters(m, (1, 3, 32, 32)) == expected


def test_cifar_resnet_parameter_counts_are_unchanged():
    assert count_parameters(create_model("resnet", depth=20), (1, 3, 32, 32)) == 272_474
    assert count_parameters(create_model("resnet", depth=8), (1, 3, 32, 32)) == 78_042


def test_vgg16_parameter_count():
    # 138M float32 parameters (553 MB) are created and initialised: about two seconds.
    m = create_model("vgg16")
    assert count_parameters(m, (1, 3, 224, 224), pool="1GiB") == 138_357_544


def test_alexnet_shape_arithmetic_at_227():
    m = create_model("alexnet", width=1 / 16)  # 6, 16, 24, 24, 16 channels; FC 256, 256
    count_parameters(m, (1, 3, 227, 227))
    assert m.fc1.W.shape == (16 * 6 * 6, 256)  # pool5 leaves 256x6x6 at width 1
    assert m.fc3.W.shape == (256, 1000)


def test_resnet_block_plans():
    assert imagenet_stages(50) == ("bottleneck", (3, 4, 6, 3))
    assert imagenet_stages(152) == ("bottleneck", (3, 8, 36, 3))
    assert imagenet_stages(34) == ("basic", (3, 4, 6, 3))
    assert imagenet_stages(26) == ("basic", (1, 2, 8, 1))
    assert imagenet_stages(50, block="basic")[0] == "basic"
    assert cifar_stages(20) == ("basic", (3, 3, 3))
    assert cifar_stages(1001) == ("bottleneck", (111, 111, 111))
    assert cifar_stages(164, block="bottleneck") == ("bottleneck", (18, 18, 18))
    for total in (4, 5, 7, 16, 50, 51, 100, 997, 3000):
        counts = split_blocks(total)
        assert sum(counts) == total and min(counts) >= 1
    assert split_blocks(50) == [3, 8, 36, 3]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"depth": 9}, "6n \\+ 2"),
        ({"depth": 12, "block": "bottleneck"}, "9n \\+ 2"),
        ({"depth": 51, "stem": "imagenet"}, "3n \\+ 2"),
        ({"depth": 12, "stem": "imagenet", "block": "bottleneck"}, "works with block='basic'"),
        ({"depth": 8, "stem": "imagenet"}, "n >= 4"),
        ({"depth": 20, "stem": "tiny"}, "stem"),
        ({"depth": 20, "block": "wide"}, "block"),
    ],
)
def test_unreachable_resnets_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        create_model("resnet", **kwargs)


def test_a_10000_layer_resnet_builds():
    # How long it takes (with planning) is measured by bench/plan.py, not here.
    m = create_model("resnet", depth=3752, stem="imagenet")  # 1,250 bottleneck blocks

    def count(lay):
        return 1 + sum(count(sub) for sub in lay._layers.values())

    assert count(m) >= 10_000
    assert len(m.blocks) == 1250
