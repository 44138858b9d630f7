"""An Inception network (Szegedy et al. 2015, GoogLeNet's modules) for CIFAR-sized images.

A 3x3 stem convolution, then inception modules with a 3x3/2 max pool (padding 1) between
consecutive ones, then global average pooling and a Linear layer. Each module has four
branches that read the same input (a fan) and are joined by layer.Cat along the channels:
    1x1 conv;  1x1 conv -> 3x3 conv;  1x1 conv -> 5x5 conv;  3x3/1 max pool (pad 1) -> 1x1 conv.
Every convolution is followed by BatchNorm and ReLU (torchvision's GoogLeNet does the same).
The modules' channel counts are GoogLeNet's inception 3a, 3b, 4a, 4b, ... (`modules` of them,
2 to 9), times `width` (rounded, at least 1).

Layers are named by position: stem.conv, stem.bn, stem.relu; module1.branch3_reduce.conv,
module1.branch3.bn, ..., module1.cat; pool1 (between module1 and module2), ...
"""

from nnmem import layer
from nnmem.models.classifier import Classifier, GlobalAvgPool, scaled

#: GoogLeNet's modules (Table 1): 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection.
GOOGLENET_MODULES = (
    (64, 96, 128, 16, 32, 32),  # 3a
    (128, 128, 192, 32, 96, 64),  # 3b
    (192, 96, 208, 16, 48, 64),  # 4a
    (160, 112, 224, 24, 64, 64),  # 4b
    (128, 128, 256, 24, 64, 64),  # 4c
    (112, 144, 288, 32, 64, 64),  # 4d
    (256, 160, 320, 32, 128, 128),  # 4e
    (256, 160, 320, 32, 128, 128),  # 5a
    (384, 192, 384, 48, 128, 128),  # 5b
)


class ConvBNReLU(layer.Layer):
    def __init__(self, in_channels, out_channels, kernel, padding=0):
        super().__init__()
        self.conv = layer.Conv2d(in_channels, out_channels, kernel, 1, padding, bias=False)
        self.bn = layer.BatchNorm2d(out_channels)
        self.relu = layer.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class InceptionModule(layer.Layer):
    """Four branches over one input, concatenated: the fan and the join."""

    def __init__(self, in_channels, c1, c3_reduce, c3, c5_reduce, c5, pool_proj):
        super().__init__()
        self.branch1 = ConvBNReLU(in_channels, c1, 1)
        self.branch3_reduce = ConvBNReLU(in_channels, c3_reduce, 1)
        self.branch3 = ConvBNReLU(c3_reduce, c3, 3, 1)
        self.branch5_reduce = ConvBNReLU(in_channels, c5_reduce, 1)
        self.branch5 = ConvBNReLU(c5_reduce, c5, 5, 2)
        self.branch_pool = layer.MaxPool2d(3, 1, 1)
        self.branch_pool_proj = ConvBNReLU(in_channels, pool_proj, 1)
        self.cat = layer.Cat(axis=1)
        self.out_channels = c1 + c3 + c5 + pool_proj

    def forward(self, x):
        return self.cat(
            [
                self.branch1(x),
                self.branch3(self.branch3_reduce(x)),
                self.branch5(self.branch5_reduce(x)),
                self.branch_pool_proj(self.branch_pool(x)),
            ]
        )


class Inception(Classifier):
    def __init__(self, num_classes=10, num_channels=3, width=1.0, modules=3):
        super().__init__()
        if not 2 <= modules <= len(GOOGLENET_MODULES):
            raise ValueError(
                f"Inception: modules={modules}; choose 2 to "
                f"{len(GOOGLENET_MODULES)} (GoogLeNet's 3a .. 5b)"
            )
        channels = scaled(64, width)
        self.stem = ConvBNReLU(num_channels, channels, 3, 1)
        self.stages = []
        for i, spec in enumerate(GOOGLENET_MODULES[:modules]):
            if i:
                pool = layer.MaxPool2d(3, 2, 1)
                setattr(self, f"pool{i}", pool)
                self.stages.append(pool)
            module = InceptionModule(channels, *(scaled(c, width) for c in spec))
            setattr(self, f"module{i + 1}", module)
            self.stages.append(module)
            channels = module.out_channels
        self.global_pool = GlobalAvgPool()
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(num_classes)

    def forward(self, x):
        y = self.stem(x)
        for stage in self.stages:
            y = stage(y)
        return self.fc(self.flatten(self.global_pool(y)))


def create_model(num_classes=10, num_channels=3, width=1.0, modules=3, **kwargs):
    return Inception(num_classes, num_channels, width, modules)
