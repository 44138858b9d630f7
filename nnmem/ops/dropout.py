"""Dropout (inverted): in training, y = x * mask with mask = 0 (probability `ratio`) or
1 / (1 - ratio); at inference y = x. The mask is drawn from the device's generator when the
kernel runs, and kept for backward."""
from nnmem import autograd
from nnmem.autograd import Operator
from nnmem.kernels import cpu as K
from nnmem.ops.arith import flat


class Dropout(Operator):
    def __init__(self, ratio=0.5):
        super().__init__()
        if not 0 <= ratio < 1:
            raise ValueError(f"dropout: ratio {ratio} must be in [0, 1)")
        self.ratio = float(ratio)

    def forward(self, x):
        if not autograd.training:
            return x
        y, mask = self.output(x.shape, x.dtype), self.output(x.shape, x.dtype)
        rng = self.device.rng

        def draw_and_apply():
            rng.random(out=flat(mask), dtype=x.dtype)
            K.dropout_forward(flat(y), flat(mask), flat(x), self.ratio)

        self.run(draw_and_apply, reads=(x,), writes=(y, mask))
        self.save(mask)
        return y

    def backward(self, dy):
        (mask,) = self.saved
        dx = self.output(dy.shape, dy.dtype)
        self.run(lambda: K.dropout_backward(flat(dx), flat(dy), flat(mask)),
                 reads=(dy, mask), writes=(dx,))
        return dx


def dropout(x, ratio=0.5):
    return Dropout(ratio)(x)
