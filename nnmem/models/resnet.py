"""ResNets (He et al. 2016): CIFAR and ImageNet forms, basic and bottleneck blocks, any depth.

CIFAR stem (the default, section 4.2 of the paper): a 3x3 convolution with 16 channels, three
stages with 16, 32 and 64 channels (x4 at a bottleneck block's output), global average
pooling and a Linear layer. depth = 6n + 2 with basic blocks (ResNet-20: n = 3 per stage),
9n + 2 with bottleneck blocks (ResNet-1001: n = 111).

ImageNet stem: a 7x7/2 convolution with 64 channels, BatchNorm, ReLU and a 3x3/2 max pool,
then four stages with 64, 128, 256 and 512 channels (x4 for bottleneck blocks). Depths 18 and
34 (basic) and 50, 101 and 152 (bottleneck) have the paper's block counts; any other depth
uses bottleneck blocks from 50 up (basic below, unless `block` says otherwise), n = (depth-2)/3
bottleneck or (depth-2)/2 basic blocks in all, split over the four stages in ResNet-152's
proportions 3 : 8 : 36 : 3 (at least one per stage). Depth 3752 (1,250 bottleneck blocks)
is a network of more than 10,000 layers, built in a fraction of a second.

Each stage's first block halves the resolution (except the first stage's) and uses a strided
1x1 convolution with BatchNorm as its shortcut (projection) wherever the shape changes;
otherwise the shortcut is the identity. A bottleneck block strides in its 3x3 convolution
(torchvision's "ResNet v1.5"; the parameter count is the same either way).

`width` multiplies every channel count (rounded, at least 1) so that tests can build a tiny
network of any depth. The blocks are kept in one flat list registered by register_layers
(named BasicBlock_0, Bottleneck_1, ...): building a deep network does no per-layer work
beyond creating the layer.
"""

from nnmem import layer
from nnmem.models.classifier import Classifier, GlobalAvgPool, scaled

#: ImageNet depth -> (block, blocks per stage), Table 1 of the paper.
IMAGENET_DEPTHS = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
STAGE_PROPORTIONS = (3, 8, 36, 3)  # ResNet-152's, for depths not in the table


class BasicBlock(layer.Layer):
    """y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); two 3x3 convolutions."""

    expansion = 1

    def __init__(self, in_channels, channels, stride):
        super().__init__()
        self.conv1 = layer.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = layer.BatchNorm2d(channels)
        self.conv2 = layer.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = layer.BatchNorm2d(channels)
        self.relu = layer.ReLU()
        self.add = layer.Add()
        self.projection = stride != 1 or in_channels != channels
        if self.projection:
            self.shortcut_conv = layer.Conv2d(in_channels, channels, 1, stride, 0, bias=False)
            self.shortcut_bn = layer.BatchNorm2d(channels)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        shortcut = self.shortcut_bn(self.shortcut_conv(x)) if self.projection else x
        return self.relu(self.add(y, shortcut))


class Bottleneck(layer.Layer):
    """y = relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x))))))) + shortcut(x)): a 1x1
    convolution to `channels`, a 3x3 one (strided), and a 1x1 one to 4 * channels."""

    expansion = 4

    def __init__(self, in_channels, channels, stride):
        super().__init__()
        out_channels = channels * self.expansion
        self.conv1 = layer.Conv2d(in_channels, channels, 1, 1, 0, bias=False)
        self.bn1 = layer.BatchNorm2d(channels)
        self.conv2 = layer.Conv2d(channels, channels, 3, stride, 1, bias=False)
        self.bn2 = layer.BatchNorm2d(channels)
        self.conv3 = layer.Conv2d(channels, out_channels, 1, 1, 0, bias=False)
        self.bn3 = layer.BatchNorm2d(out_channels)
        self.relu = layer.ReLU()
        self.add = layer.Add()
        self.projection = stride != 1 or in_channels != out_channels
        if self.projection:
            self.shortcut_conv = layer.Conv2d(in_channels, out_channels, 1, stride, 0, bias=False)
            self.shortcut_bn = layer.BatchNorm2d(out_channels)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        shortcut = self.shortcut_bn(self.shortcut_conv(x)) if self.projection else x
        return self.relu(self.add(y, shortcut))


BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


def split_blocks(total, proportions=STAGE_PROPORTIONS):
    """`total` blocks over len(proportions) stages, as proportional as whole numbers allow
    (largest remainders), at least one per stage, summing exactly to `total`."""
    stages = len(proportions)
    if total < stages:
        raise ValueError(f"{total} blocks cannot fill {stages} stages")
    weight = sum(proportions)
    exact = [total * p / weight for p in proportions]
    counts = [int(e) for e in exact]
    by_remainder = sorted(range(stages), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    for i in range(stages):  # a stage left empty takes a block from the largest one
        if counts[i] == 0:
            counts[i] = 1
            counts[max(range(stages), key=lambda j: counts[j])] -= 1
    return counts


def cifar_stages(depth, block=None):
    """(block name, blocks per stage) of a CIFAR ResNet, or a ValueError naming the depths."""
    if block not in (None, "basic", "bottleneck"):
        raise ValueError(f"ResNet block {block!r}; use 'basic', 'bottleneck' or None")
    basic_ok = depth >= 8 and (depth - 2) % 6 == 0
    bottleneck_ok = depth >= 11 and (depth - 2) % 9 == 0
    if block is None:  # basic blocks when the depth allows them (ResNet-20, -56, -110)
        block = "basic" if basic_ok or not bottleneck_ok else "bottleneck"
    if block == "basic":
        if not basic_ok:
            raise ValueError(
                f"ResNet depth {depth}: a CIFAR ResNet has depth 6n + 2 with basic "
                "blocks (8, 14, 20, 32, 44, 56, 110, ...) or 9n + 2 with "
                "block='bottleneck' (11, 20, 29, ..., 164, 1001, ...)"
            )
        return block, ((depth - 2) // 6,) * 3
    if not bottleneck_ok:
        raise ValueError(
            f"ResNet depth {depth}: a CIFAR ResNet of bottleneck blocks has depth "
            "9n + 2 (11, 20, 29, ..., 164, 1001, ...)"
        )
    return block, ((depth - 2) // 9,) * 3


def imagenet_stages(depth, block=None):
    """(block name, blocks per stage) of an ImageNet ResNet, or a ValueError naming the depths."""
    if block not in (None, "basic", "bottleneck"):
        raise ValueError(f"ResNet block {block!r}; use 'basic', 'bottleneck' or None")
    standard = IMAGENET_DEPTHS.get(depth)
    if standard is not None and block in (None, standard[0]):
        return standard
    if block is None:
        block = "bottleneck" if depth >= 50 else "basic"
    per_block, minimum = (3, 14) if block == "bottleneck" else (2, 10)
    if depth < minimum or (depth - 2) % per_block:
        other, other_per_block, other_minimum = (
            ("basic", 2, 10) if block == "bottleneck" else ("bottleneck", 3, 14)
        )
        hint = ""
        if depth >= other_minimum and (depth - 2) % other_per_block == 0:
            hint = f"; depth {depth} works with block={other!r}"
        raise ValueError(
            f"ResNet depth {depth}: an ImageNet ResNet of {block} blocks has depth "
            f"{per_block}n + 2 with n >= 4 blocks ({minimum}, {minimum + per_block}, "
            f"{minimum + 2 * per_block}, ...), {other} blocks depth {other_per_block}n + 2 "
            f"({other_minimum}, {other_minimum + other_per_block}, ...); the standard depths are "
            f"18, 34 (basic) and 50, 101, 152 (bottleneck), and other depths take bottleneck "
            f"blocks from 50 up unless block= says otherwise{hint}"
        )
    return block, tuple(split_blocks((depth - 2) // per_block))


class ResNet(Classifier):
    def __init__(
        self, depth=20, num_classes=10, num_channels=3, block=None, stem="cifar", width=1.0
    ):
        super().__init__()
        if stem == "cifar":
            block, counts = cifar_stages(depth, block)
            stem_channels, stage_channels = 16, (16, 32, 64)
        elif stem == "imagenet":
            block, counts = imagenet_stages(depth, block)
            stem_channels, stage_channels = 64, (64, 128, 256, 512)
        else:
            raise ValueError(f"ResNet stem {stem!r}; use 'cifar' or 'imagenet'")
        self.depth, self.block_type, self.stem, self.blocks_per_stage = depth, block, stem, counts
        Block = BLOCKS[block]
        stem_channels = scaled(stem_channels, width)
        if stem == "cifar":
            self.conv1 = layer.Conv2d(num_channels, stem_channels, 3, 1, 1, bias=False)
        else:
            self.conv1 = layer.Conv2d(num_channels, stem_channels, 7, 2, 3, bias=False)
        self.bn1 = layer.BatchNorm2d(stem_channels)
        self.relu = layer.ReLU()
        self.maxpool = layer.MaxPool2d(3, 2, 1) if stem == "imagenet" else None
        self.blocks = []
        in_channels = stem_channels
        for stage, (channels, count) in enumerate(zip(stage_channels, counts)):
            channels = scaled(channels, width)
            for i in range(count):
                stride = 2 if stage > 0 and i == 0 else 1
                self.blocks.append(Block(in_channels, channels, stride))
                in_channels = channels * Block.expansion
        self.register_layers(*self.blocks)
        self.global_pool = GlobalAvgPool()
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(num_classes)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            y = self.maxpool(y)
        for block in self.blocks:
            y = block(y)
        return self.fc(self.flatten(self.global_pool(y)))


def create_model(
    depth=20, num_classes=10, num_channels=3, block=None, stem="cifar", width=1.0, **kwargs
):
    return ResNet(depth, num_classes, num_channels, block, stem, width)
