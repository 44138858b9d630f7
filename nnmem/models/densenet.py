"""A small DenseNet (Huang et al. 2017) for CIFAR-sized images.

A 3x3 stem convolution with 2 * growth channels, then `blocks` dense blocks joined by
transition layers, then BatchNorm, ReLU, global average pooling and a Linear layer.

Dense block: each of its `layers_per_block` layers is BatchNorm -> ReLU -> 3x3 convolution
with `growth` output channels, and its input is the concatenation (layer.Cat, along the
channels) of the block's input and the outputs of every earlier layer of the block: the
full joins that make DenseNet's memory grow quadratically with the block's length (every
Cat writes a new, longer copy of the features). The block's output concatenates all of them:
in_channels + layers_per_block * growth channels.

Transition: BatchNorm -> ReLU -> 1x1 convolution (same channel count) -> 2x2 average pool.

Layers are named by position: block1.layer2.bn, block1.layer2.relu, block1.layer2.conv;
block1.cat1 joins the block's input and layer1's output (layer2's input), block1.cat2 adds
layer2's output, ..., and block1.cat is the block's output; transition1.bn, ... .
"""

from nnmem import layer
from nnmem.models.classifier import Classifier, GlobalAvgPool


class DenseLayer(layer.Layer):
    """BatchNorm -> ReLU -> Conv3x3(growth), on the concatenation of its inputs."""

    def __init__(self, in_channels, growth):
        super().__init__()
        self.bn = layer.BatchNorm2d(in_channels)
        self.relu = layer.ReLU()
        self.conv = layer.Conv2d(in_channels, growth, 3, 1, 1, bias=False)

    def forward(self, x):
        return self.conv(self.relu(self.bn(x)))


class DenseBlock(layer.Layer):
    """`num_layers` DenseLayers; layer i reads cat(x, out_0, ..., out_{i-1})."""

    def __init__(self, in_channels, num_layers, growth):
        super().__init__()
        self.layers, self.joins = [], []
        for i in range(num_layers):
            dense = DenseLayer(in_channels + i * growth, growth)
            setattr(self, f"layer{i + 1}", dense)
            self.layers.append(dense)
            # the join feeding layer i + 1 (none before the first), then the block's output
            join = layer.Cat(axis=1)
            setattr(self, f"cat{i + 1}" if i + 1 < num_layers else "cat", join)
            self.joins.append(join)
        self.out_channels = in_channels + num_layers * growth

    def forward(self, x):
        features, joined = [x], x
        for dense, join in zip(self.layers, self.joins):
            features.append(dense(joined))  # the first layer reads x itself
            joined = join(features)
        return joined


class Transition(layer.Layer):
    """BatchNorm -> ReLU -> Conv1x1 -> AvgPool2d(2): halves the resolution between blocks."""

    def __init__(self, channels):
        super().__init__()
        self.bn = layer.BatchNorm2d(channels)
        self.relu = layer.ReLU()
        self.conv = layer.Conv2d(channels, channels, 1, 1, 0, bias=False)
        self.pool = layer.AvgPool2d(2, 2)

    def forward(self, x):
        return self.pool(self.conv(self.relu(self.bn(x))))


class DenseNet(Classifier):
    def __init__(self, growth=12, layers_per_block=4, blocks=3, num_classes=10, num_channels=3):
        super().__init__()
        if blocks < 1 or layers_per_block < 1 or growth < 1:
            raise ValueError(
                f"DenseNet: growth={growth}, layers_per_block={layers_per_block}, "
                f"blocks={blocks}; each must be at least 1"
            )
        channels = 2 * growth
        self.conv1 = layer.Conv2d(num_channels, channels, 3, 1, 1, bias=False)
        self.stages = []
        for b in range(blocks):
            block = DenseBlock(channels, layers_per_block, growth)
            setattr(self, f"block{b + 1}", block)
            self.stages.append(block)
            channels = block.out_channels
            if b + 1 < blocks:
                transition = Transition(channels)
                setattr(self, f"transition{b + 1}", transition)
                self.stages.append(transition)
        self.bn = layer.BatchNorm2d(channels)
        self.relu = layer.ReLU()
        self.global_pool = GlobalAvgPool()
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(num_classes)

    def forward(self, x):
        y = self.conv1(x)
        for stage in self.stages:
            y = stage(y)
        y = self.relu(self.bn(y))
        return self.fc(self.flatten(self.global_pool(y)))


def create_model(growth=12, layers_per_block=4, blocks=3, num_classes=10, num_channels=3, **kwargs):
    return DenseNet(growth, layers_per_block, blocks, num_classes, num_channels)
