"""Local response normalisation across channels (AlexNet; Caffe's LRN, torch's
LocalResponseNorm): y = x / (k + alpha/size * sum of x^2 over `size` neighbouring channels)^beta.

Memory: the forward writes y only, and the backward reads x, y and dy (cuDNN's LRN and
SuperNeurons do the same): the denominator's base, `scale`, a tensor of x's size, is never kept;
the backward kernel takes its window sums again, exactly as the forward did (Caffe keeps scale,
a third tensor). An LRN layer keeps x and y until its backward has run: a layer that is cheap to
compute and dear to keep, the kind SuperNeurons recomputes in the backward pass instead of
keeping (its rebuild is the forward call itself: y from x).
"""

from nnmem.operation import SAME, Operator

__all__ = ["LRN", "lrn"]


class LRN(Operator):
    """Normalise each (n, h, w) over a window of `size` channels centred on the channel."""

    def __init__(self, size=5, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        if int(size) != size or size < 1:
            raise ValueError(f"lrn: size {size!r}; need a whole number of channels >= 1")
        self.size, self.alpha, self.beta, self.k = int(size), float(alpha), float(beta), float(k)

    def forward(self, x):
        K = self.kernels
        if x.ndim() != 4:
            raise ValueError(
                f"lrn: input of shape {x.shape}; LRN normalises across the channels "
                "of (N, C, H, W) input"
            )
        y = self.output(x.shape, x.dtype)
        size, alpha, beta, k = self.size, self.alpha, self.beta, self.k
        self.run(
            lambda y_, x_: K.lrn_forward(y_, x_, size, alpha, beta, k),
            reads=(x,),
            writes=(y,),
            rebuild=SAME,
        )
        self.save(x, y)
        return y

    def backward(self, dy):
        K = self.kernels
        x, y = self.saved
        dx = self.output(x.shape, dy.dtype)
        size, alpha, beta, k = self.size, self.alpha, self.beta, self.k
        self.run(
            lambda dx_, dy_, x_, y_: K.lrn_backward(dx_, dy_, x_, y_, size, alpha, beta, k),
            reads=(dy, x, y),
            writes=(dx,),
        )
        return dx


def lrn(x, size=5, alpha=1e-4, beta=0.75, k=1.0):
    """Functional form (defaults: AlexNet's and torch.nn.LocalResponseNorm's)."""
    return LRN(size, alpha, beta, k)(x)
