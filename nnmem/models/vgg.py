"""VGG-16 (Simonyan and Zisserman 2015, configuration D): thirteen 3x3 convolutions (padding 1)
each followed by a ReLU, in five groups of 64, 128, 256, 512 and 512 channels that each end
in a 2x2/2 max pool, then fully connected 4096, 4096 and num_classes with ReLU and Dropout.

For 224x224 input the last pool leaves 512x7x7, and the network has 138,357,544 parameters
(1000 classes). The first Linear layer sizes itself from its first input, so any input of
at least 32x32 works (32x32 leaves 512x1x1). `width` multiplies every channel count and
fully connected width (rounded, at least 1) so that tests can train a tiny VGG.

Layers are named by position: conv1 .. conv13, relu1 .. relu15, pool1 .. pool5, fc1 .. fc3,
dropout1, dropout2.
"""

from nnmem import layer
from nnmem.models.classifier import Classifier, scaled

#: Channels per convolution; "M" is a max pool (configuration D of the paper).
VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG(Classifier):
    def __init__(self, config=VGG16, num_classes=1000, num_channels=3, width=1.0):
        super().__init__()
        self.features = []  # the convolutional part, in order
        in_channels, conv, pool = num_channels, 0, 0
        for item in config:
            if item == "M":
                pool += 1
                self._add(f"pool{pool}", layer.MaxPool2d(2, 2))
            else:
                conv += 1
                channels = scaled(item, width)
                self._add(f"conv{conv}", layer.Conv2d(in_channels, channels, 3, 1, 1))
                self._add(f"relu{conv}", layer.ReLU())
                in_channels = channels
        self.flatten = layer.Flatten()
        hidden = scaled(4096, width)
        self.fc1 = layer.Linear(hidden)
        setattr(self, f"relu{conv + 1}", layer.ReLU())
        self.dropout1 = layer.Dropout(0.5)
        self.fc2 = layer.Linear(hidden)
        setattr(self, f"relu{conv + 2}", layer.ReLU())
        self.dropout2 = layer.Dropout(0.5)
        self.fc3 = layer.Linear(num_classes)
        self.classifier = [
            self.fc1,
            getattr(self, f"relu{conv + 1}"),
            self.dropout1,
            self.fc2,
            getattr(self, f"relu{conv + 2}"),
            self.dropout2,
            self.fc3,
        ]

    def _add(self, name, lay):
        setattr(self, name, lay)
        self.features.append(lay)

    def forward(self, x):
        y = x
        for lay in self.features:
            y = lay(y)
        y = self.flatten(y)
        for lay in self.classifier:
            y = lay(y)
        return y


def create_model(num_classes=1000, num_channels=3, width=1.0, **kwargs):
    return VGG(VGG16, num_classes, num_channels, width)
