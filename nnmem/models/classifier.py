"""Classifier: the train_one_batch every zoo model shares (forward, loss, optimizer)."""
from nnmem import layer, model


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
