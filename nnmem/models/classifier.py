"""What the zoo models share: Classifier (train_one_batch: forward, loss, optimizer) and
GlobalAvgPool (the mean over each feature map, whatever its resolution)."""

from nnmem import layer, model


def scaled(channels, width):
    """A layer's channel count times the width multiplier, rounded, at least 1."""
    return max(1, int(round(channels * width)))


class Classifier(model.Model):
    """A Model whose training step is softmax cross-entropy on its logits, then the optimizer."""

    def __init__(self):
        super().__init__()
        self.softmax_cross_entropy = layer.SoftMaxCrossEntropy()

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        self.optimizer(loss)
        return out, loss


class GlobalAvgPool(layer.Layer):
    """y[n, c] = mean over h, w of x[n, c, h, w], as (N, C, 1, 1): an AvgPool2d whose window is
    the input's whole resolution (8x8 for a 32x32 CIFAR image), made at the first call."""

    def __init__(self):
        super().__init__()
        self.pool = None

    def forward(self, x):
        if self.pool is None:
            self.pool = layer.AvgPool2d(x.shape[2:])
        return self.pool(x)
