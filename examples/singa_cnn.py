"""The CNN example from SINGA's Model documentation, unchanged except for two lines: the
imports (``from nnmem import ...``) and ``create_cpu_device()`` for ``create_cuda_gpu()``.
It trains on the UCI digits shipped with nnmem (resized to 28x28).

    python examples/singa_cnn.py [epochs]
"""
import sys
import time

import numpy as np

from nnmem import device, layer, model, opt, tensor
from nnmem.data import iterate_batches, load_digits, one_hot


class CNN(model.Model):

    def __init__(self, num_classes=10, num_channels=1):
        super(CNN, self).__init__()
        self.conv1 = layer.Conv2d(num_channels, 20, 5, padding=0, activation="RELU")
        self.conv2 = layer.Conv2d(20, 50, 5, padding=0, activation="RELU")
        self.linear1 = layer.Linear(500)
        self.linear2 = layer.Linear(num_classes)
        self.pooling1 = layer.MaxPool2d(2, 2, padding=0)
        self.pooling2 = layer.MaxPool2d(2, 2, padding=0)
        self.relu = layer.ReLU()
        self.flatten = layer.Flatten()
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.conv1(x)
        y = self.pooling1(y)
        y = self.conv2(y)
        y = self.pooling2(y)
        y = self.flatten(y)
        y = self.linear1(y)
        y = self.relu(y)
        y = self.linear2(y)
        return y

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


def main(epochs=10, batch_size=64, num_classes=10, IMG_SIZE=28, lr=0.02):
    x_train, y_train, x_test, y_test = load_digits(size=IMG_SIZE)
    model_ = CNN()
    sgd = opt.SGD(lr=lr, momentum=0.9, weight_decay=1e-5)
    model_.set_optimizer(sgd)
    dev = device.create_cpu_device()
    dev.SetRandSeed(0)
    tx = tensor.Tensor((batch_size, 1, IMG_SIZE, IMG_SIZE), dev, tensor.float32)
    ty = tensor.Tensor((batch_size, num_classes), dev, tensor.int32)
    model_.compile([tx], is_train=True, use_graph=True, sequential=False)
    accuracy = 0.0
    for epoch in range(epochs):
        start = time.perf_counter()
        model_.train()
        for x, y in iterate_batches(x_train, y_train, batch_size, drop_last=True, epoch=epoch):
            tx.copy_from_numpy(x)
            ty.copy_from_numpy(one_hot(y, num_classes))
            out, loss = model_(tx, ty)
        seconds = time.perf_counter() - start
        model_.eval()
        correct = 0
        for x, y in iterate_batches(x_test, y_test, batch_size, shuffle=False):
            logits = model_(tensor.from_numpy(x, dev))
            correct += int((tensor.to_numpy(logits).argmax(axis=1) == y).sum())
        accuracy = correct / len(y_test)
        print(f"epoch {epoch}: loss {tensor.to_numpy(loss)[0]:.4f} test accuracy {accuracy:.4f} "
              f"({len(x_train) // batch_size * batch_size / seconds:.0f} images/s)")
    return accuracy


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
