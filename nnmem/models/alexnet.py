"""AlexNet (Krizhevsky et al. 2012) in Caffe's form, as SuperNeurons lists it: 23 layers,
CONV1 RELU1 LRN1 POOL1 CONV2 RELU2 LRN2 POOL2 CONV3 RELU3 CONV4 RELU4 CONV5 RELU5 POOL5
FC1 RELU6 Dropout1 FC2 RELU7 Dropout2 FC3 Softmax (the softmax is the loss, in Classifier).

Shapes for a 3x227x227 image: conv1 96@11x11/4 -> 96x55x55, pool 3x3/2 -> 27x27,
conv2 256@5x5 pad 2, pool -> 13x13, conv3 384@3x3, conv4 384@3x3, conv5 256@3x3 (pad 1),
pool -> 256x6x6, then fully connected 4096, 4096 and num_classes. LRN: 5 channels,
alpha 1e-4, beta 0.75, k 1. The smallest input the shape arithmetic allows is 67x67.

Caffe splits conv2, conv4 and conv5 into two groups (the two GPUs of 2012); nnmem has no
grouped convolution, so every convolution here is ungrouped (group=1), which gives those
three layers twice the weights: 62,378,344 parameters for 1000 classes instead of Caffe's
60,965,224.

`width` multiplies every channel count and fully connected width (rounded, at least 1), so
that tests can train a tiny AlexNet. Every position has its own layer object, hence its own
dotted name (relu1 .. relu7, lrn1, lrn2, pool1, pool2, pool5, dropout1, dropout2).
"""

from nnmem import layer
from nnmem.models.classifier import Classifier, scaled


class AlexNet(Classifier):
    def __init__(self, num_classes=1000, num_channels=3, width=1.0):
        super().__init__()
        c1, c2, c3, c4, c5, f1, f2 = (
            scaled(c, width) for c in (96, 256, 384, 384, 256, 4096, 4096)
        )
        self.conv1 = layer.Conv2d(num_channels, c1, 11, 4, 0)
        self.relu1 = layer.ReLU()
        self.lrn1 = layer.LRN(5, 1e-4, 0.75, 1.0)
        self.pool1 = layer.MaxPool2d(3, 2)
        self.conv2 = layer.Conv2d(c1, c2, 5, 1, 2)
        self.relu2 = layer.ReLU()
        self.lrn2 = layer.LRN(5, 1e-4, 0.75, 1.0)
        self.pool2 = layer.MaxPool2d(3, 2)
        self.conv3 = layer.Conv2d(c2, c3, 3, 1, 1)
        self.relu3 = layer.ReLU()
        self.conv4 = layer.Conv2d(c3, c4, 3, 1, 1)
        self.relu4 = layer.ReLU()
        self.conv5 = layer.Conv2d(c4, c5, 3, 1, 1)
        self.relu5 = layer.ReLU()
        self.pool5 = layer.MaxPool2d(3, 2)
        self.flatten = layer.Flatten()
        self.fc1 = layer.Linear(f1)
        self.relu6 = layer.ReLU()
        self.dropout1 = layer.Dropout(0.5)
        self.fc2 = layer.Linear(f2)
        self.relu7 = layer.ReLU()
        self.dropout2 = layer.Dropout(0.5)
        self.fc3 = layer.Linear(num_classes)

    def forward(self, x):
        y = self.pool1(self.lrn1(self.relu1(self.conv1(x))))
        y = self.pool2(self.lrn2(self.relu2(self.conv2(y))))
        y = self.relu3(self.conv3(y))
        y = self.relu4(self.conv4(y))
        y = self.pool5(self.relu5(self.conv5(y)))
        y = self.dropout1(self.relu6(self.fc1(self.flatten(y))))
        y = self.dropout2(self.relu7(self.fc2(y)))
        return self.fc3(y)


def create_model(num_classes=1000, num_channels=3, width=1.0, **kwargs):
    return AlexNet(num_classes, num_channels, width)
