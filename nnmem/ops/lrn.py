"""Local response normalisation across channels (AlexNet; Caffe's LRN, torch's
LocalResponseNorm): y = x / (k + alpha/size * sum of x^2 over `size` neighbouring channels)^beta.

Memory: the forward writes y only, and the backward reads x, y and dy (cuDNN's LRN and
SuperNeurons do the same): the denominator's base, `scale`, a tensor of x's size, is never kept;
the backward kernel takes its window sums again, exactly as the forward did (Caffe keeps scale,
a third tensor). An LRN layer keeps x and y until its backward has run: a layer that is cheap to
compute and dear to keep, the kind SuperNeurons recomputes in the backward pass instead of
keeping (its rebuild is the forward call itself: y from x).

The window: `size` channels, `before` of them before c (None: size//2, torch's and Caffe's
window, c - size//2 .. c + (size-1)//2). ONNX's LRN is this with k = its bias and
before = (size-1)//2 (its window c - floor((size-1)/2) .. c + ceil((size-1)/2)): the same
window for odd sizes, one channel later for even ones.
"""

from nnmem.operation import SAME, Operator

__all__ = ["LRN", "lrn"]


class LRN(Operator):
    """Normalise each (n, h, w) over a window of `size` channels around the channel, `before`
    of them before it (None: size//2)."""

    def __init__(self, size=5, alpha=1e-4, beta=0.75, k=1.0, before=None):
        super().__init__()
        if int(size) != size or size < 1:
            raise ValueError(f"lrn: size {size!r}; need a whole number of channels >= 1")
        self.size, self.alpha, self.beta, self.k = int(size), float(alpha), float(beta), float(k)
        before = self.size // 2 if before is None else before
        if int(before) != before or not 0 <= before < self.size:
            raise ValueError(
                f"lrn: before={before!r}; the window's channels before c must be a whole "
                f"number in [0, size={self.size}): size//2 (torch) or (size-1)//2 (ONNX)"
            )
        self.before = int(before)

    def forward(self, x):
        K = self.kernels
        if x.ndim() != 4:
            raise ValueError(
                f"lrn: input of shape {x.shape}; LRN normalises across the channels "
                "of (N, C, H, W) input"
            )
        y = self.output(x.shape, x.dtype)
        size, alpha, beta, k, before = self.size, self.alpha, self.beta, self.k, self.before
        self.run(
            lambda y_, x_: K.lrn_forward(y_, x_, size, alpha, beta, k, before),
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
        size, alpha, beta, k, before = self.size, self.alpha, self.beta, self.k, self.before
        self.run(
            lambda dx_, dy_, x_, y_: K.lrn_backward(dx_, dy_, x_, y_, size, alpha, beta, k, before),
            reads=(dy, x, y),
            writes=(dx,),
        )
        return dx


def lrn(x, size=5, alpha=1e-4, beta=0.75, k=1.0, before=None):
    """Functional form (defaults: AlexNet's and torch.nn.LocalResponseNorm's)."""
    return LRN(size, alpha, beta, k, before)(x)
