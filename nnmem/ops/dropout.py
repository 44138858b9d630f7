"""Dropout (inverted): in training, y = x * mask with mask = 0 (probability `ratio`) or
1 / (1 - ratio); at inference y = x.

The mask is a counter-based draw (kernels/counter_rng.py): element i of draw number c under
the device's seed is a hash of (seed, c, i), computed by the kernel, so the CPU and a GPU draw
the same masks and the host never takes part. The draw number c is the device's dropout
counter (Device.make_dropout_counter), a 1-element tensor every draw reads and increments: a
graph therefore keeps the draws in their recorded order, whatever order it runs the other
operations in, a replay draws a new mask every iteration, and replays give the same numbers as
eager runs. The mask is kept for backward.
"""

from nnmem.operation import Operator, is_training
from nnmem.tensor import Tensor

__all__ = ["Dropout", "dropout"]


class Dropout(Operator):
    def __init__(self, ratio=0.5):
        super().__init__()
        if not 0 <= ratio < 1:
            raise ValueError(f"dropout: ratio {ratio} must be in [0, 1)")
        self.ratio = float(ratio)

    def forward(self, x):
        K = self.kernels
        if not is_training():
            return x
        y, mask = self.output(x.shape, x.dtype), self.output(x.shape, x.dtype)
        device, ratio = self.device, self.ratio
        state = device.make_dropout_counter(Tensor)

        def draw_and_apply(y_, mask_, state_, x_, _):
            # device.seed is read when this runs, so a SetRandSeed between replays counts
            flat = y_.reshape(-1), mask_.reshape(-1)
            K.dropout_forward(*flat, state_, x_.reshape(-1), ratio, device.seed)

        def apply_mask(y_, x_, mask_):  # the same product, with the mask drawn above
            K.mul(y_.reshape(-1), x_.reshape(-1), mask_.reshape(-1))

        self.run(
            draw_and_apply,
            reads=(x, state),
            writes=(y, mask, state),
            inplace=((y, x),),
            rebuild=(apply_mask, (x, mask), (y,)),
        )
        self.save(mask)
        return y

    def backward(self, dy):
        K = self.kernels
        (mask,) = self.saved
        dx = self.output(dy.shape, dy.dtype)
        self.run(
            lambda dx_, dy_, m_: K.dropout_backward(
                dx_.reshape(-1), dy_.reshape(-1), m_.reshape(-1)
            ),
            reads=(dy, mask),
            writes=(dx,),
            inplace=((dx, dy), (dx, mask)),
        )
        return dx


def dropout(x, ratio=0.5):
    return Dropout(ratio)(x)
