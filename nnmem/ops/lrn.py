"""Local response normalisation across channels (AlexNet; Caffe's LRN, torch's
LocalResponseNorm): y = x / (k + alpha/size * sum of x^2 over `size` neighbouring channels)^beta.

Memory: the forward writes a second tensor of x's shape, `scale` (the denominator's base), and
backward reads x, y and scale: an LRN layer keeps three activations of its input's size alive
until its backward has run (Caffe keeps the same): a layer that is cheap to compute and dear
to keep, the kind SuperNeurons recomputes in the backward pass instead of keeping.
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
        scale = self.output(x.shape, x.dtype)
        size, alpha, beta, k = self.size, self.alpha, self.beta, self.k
        self.run(
            lambda y_, s_, x_: K.lrn_forward(y_, s_, x_, size, alpha, beta, k),
            reads=(x,),
            writes=(y, scale),
            rebuild=SAME,
        )
        self.save(x, y, scale)
        return y

    def backward(self, dy):
        K = self.kernels
        x, y, scale = self.saved
        dx = self.output(x.shape, dy.dtype)
        size, alpha, beta = self.size, self.alpha, self.beta
        self.run(
            lambda dx_, dy_, x_, y_, s_: K.lrn_backward(dx_, dy_, x_, y_, s_, size, alpha, beta),
            reads=(dy, x, y, scale),
            writes=(dx,),
        )
        return dx


def lrn(x, size=5, alpha=1e-4, beta=0.75, k=1.0):
    """Functional form (defaults: AlexNet's and torch.nn.LocalResponseNorm's)."""
    return LRN(size, alpha, beta, k)(x)
