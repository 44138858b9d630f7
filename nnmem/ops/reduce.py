"""Sums and means over axes: y = sum of x over `axes` (all axes by default).

The forward is one reduce_sum (kernels/cpu/strided.py: each output element summed by one
thread, in a fixed order, in float64). The gradient is dy read back at every summed position:
a strided gather with stride 0 along the summed axes, the same index map run backwards.
mean = sum scaled by 1 / (number of summed elements), in the same kernel call.
"""

import math

from nnmem.operation import Operator
from nnmem.ops.strides import axis_index, check_rank, contiguous_strides, pad, reduction

__all__ = ["Sum", "reduce_mean", "reduce_sum"]


def _axes(op, axes, ndim):
    if axes is None:
        return tuple(range(ndim))
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    return tuple(sorted({axis_index(op, a, ndim) for a in axes}))


class Sum(Operator):
    """y = scale * sum_{axes} x; keepdims keeps each summed axis with size 1."""

    def __init__(self, axes=None, keepdims=False, mean=False):
        super().__init__("Mean" if mean else "Sum")
        self.axes, self.keepdims, self.mean = axes, keepdims, mean

    def forward(self, x):
        if x.dtype.kind != "f":
            raise TypeError(f"{self.name}: needs a float tensor, not {x.dtype}")
        check_rank(self.name, x.shape)
        axes = _axes(self.name, self.axes, x.ndim())
        kept = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        count = math.prod(x.shape[i] for i in axes)
        scale = 1.0 / count if self.mean and count else 1.0
        shape = kept if self.keepdims else tuple(n for i, n in enumerate(x.shape) if i not in axes)
        self.x_shape, self.kept, self.scale = x.shape, kept, scale
        return summed(self, x, kept, shape, scale)

    def backward(self, dy):
        dx = self.output(self.x_shape, dy.dtype)
        K, scale = self.kernels, self.scale
        strides = [0 if k == 1 else s for k, s in zip(self.kept, contiguous_strides(self.kept))]
        args = pad(self.x_shape, 1), pad(strides, 0)

        def kernel(dx_, dy_):
            K.strided_gather(dx_.reshape(-1), dy_.reshape(-1), *args, 0)
            if scale != 1.0:
                K.scale(dx_.reshape(-1), scale)

        self.run(kernel, reads=(dy,), writes=(dx,))
        return dx


def summed(op, x, kept, shape, scale=1.0):
    """A new tensor of `shape`: scale * x summed down to `kept` (x's rank, 1 on each summed
    axis), by one reduce_sum call of `op`."""
    y = op.output(shape, x.dtype)
    K, args = op.kernels, reduction(x.shape, kept)

    def kernel(y_, x_):
        K.reduce_sum(y_.reshape(-1), x_.reshape(-1), *args)
        if scale != 1.0:
            K.scale(y_.reshape(-1), scale)

    op.run(kernel, reads=(x,), writes=(y,))
    return y


def reduce_sum(x, axes=None, keepdims=True):
    """Sum over `axes` (all by default), keeping them with size 1 unless keepdims is false
    (SINGA's and ONNX's default)."""
    return Sum(axes, keepdims)(x)


def reduce_mean(x, axes=None, keepdims=True):
    """Mean over `axes` (all by default); keepdims as reduce_sum."""
    return Sum(axes, keepdims, mean=True)(x)
