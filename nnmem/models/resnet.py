"""ResNet for CIFAR-sized images (He et al. 2016, section 4.2): a 3x3 stem, three stages of
basic blocks with 16, 32 and 64 channels, global average pooling and a Linear layer.
depth = 6n + 2: ResNet-20 has n = 3 blocks per stage. A stage that halves the resolution
uses a strided 1x1 convolution with BatchNorm as its shortcut (projection)."""
from nnmem import layer
from nnmem.models.classifier import Classifier


class BasicBlock(layer.Layer):
    """y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))."""

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


class ResNet(Classifier):
    def __init__(self, depth=20, num_classes=10, num_channels=3):
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"ResNet depth {depth}: a CIFAR ResNet has depth 6n + 2 "
                             "(8, 14, 20, 32, 44, 56, 110, ...)")
        blocks_per_stage = (depth - 2) // 6
        self.conv1 = layer.Conv2d(num_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = layer.BatchNorm2d(16)
        self.relu = layer.ReLU()
        self.blocks = []
        in_channels = 16
        for stage, channels in enumerate((16, 32, 64)):
            for i in range(blocks_per_stage):
                stride = 2 if stage > 0 and i == 0 else 1
                self.blocks.append(BasicBlock(in_channels, channels, stride))
                in_channels = channels
        self.register_layers(*self.blocks)
        self.global_pool = None  # an AvgPool2d over the last stage's resolution, made lazily
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(num_classes)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        for block in self.blocks:
            y = block(y)
        if self.global_pool is None:  # 8x8 for 32x32 input
            self.global_pool = layer.AvgPool2d(y.shape[2:])
        return self.fc(self.flatten(self.global_pool(y)))


def create_model(depth=20, num_classes=10, num_channels=3, **kwargs):
    return ResNet(depth, num_classes, num_channels)
