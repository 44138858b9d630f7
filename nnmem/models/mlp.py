"""A multilayer perceptron: Flatten, then Linear + ReLU per hidden layer, then Linear."""

from nnmem import layer
from nnmem.models.classifier import Classifier


class MLP(Classifier):
    def __init__(self, hidden=(256, 256), num_classes=10):
        super().__init__()
        self.flatten = layer.Flatten()
        self.hidden = [layer.Linear(h) for h in hidden]
        self.register_layers(*self.hidden)
        self.relu = layer.ReLU()
        self.out = layer.Linear(num_classes)

    def forward(self, x):
        y = self.flatten(x)
        for linear in self.hidden:
            y = self.relu(linear(y))
        return self.out(y)


def create_model(hidden=(256, 256), num_classes=10, **kwargs):
    return MLP(tuple(hidden), num_classes)
