"""The CNN of SINGA's Model documentation (LeNet-like): two 5x5 convolutions with max pooling,
then two fully connected layers."""

from nnmem import layer
from nnmem.models.classifier import Classifier


class CNN(Classifier):
    def __init__(self, num_classes=10, num_channels=1):
        super().__init__()
        self.conv1 = layer.Conv2d(num_channels, 20, 5, padding=0, activation="RELU")
        self.conv2 = layer.Conv2d(20, 50, 5, padding=0, activation="RELU")
        self.linear1 = layer.Linear(500)
        self.linear2 = layer.Linear(num_classes)
        self.pooling1 = layer.MaxPool2d(2, 2, padding=0)
        self.pooling2 = layer.MaxPool2d(2, 2, padding=0)
        self.relu = layer.ReLU()
        self.flatten = layer.Flatten()

    def forward(self, x):
        y = self.pooling1(self.conv1(x))
        y = self.pooling2(self.conv2(y))
        y = self.relu(self.linear1(self.flatten(y)))
        return self.linear2(y)


def create_model(num_classes=10, num_channels=1, **kwargs):
    return CNN(num_classes, num_channels)
