"""Softmax along any axis: y = exp(x - max) / sum(exp(x - max)) over that axis.

The tensor is viewed as (outer, n, inner) with n the axis (kernels/cpu/softmax.py), so no
transpose is needed. It saves its output: dx = y * (dy - sum(dy * y)) reads y alone, so the
forward may overwrite x and the backward dy, in place.
"""

import math

from nnmem.operation import Operator

__all__ = ["SoftMax", "softmax"]


class SoftMax(Operator):
    def __init__(self, axis=1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        if x.dtype.kind != "f":
            raise TypeError(f"softmax: needs a float tensor, not {x.dtype}")
        if not -x.ndim() <= self.axis < max(x.ndim(), 1):
            raise ValueError(f"softmax: axis {self.axis} for a {x.ndim()}-D tensor")
        axis = self.axis % x.ndim()
        self.view = (math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1 :]))
        y = self.output(x.shape, x.dtype)
        fwd, view = self.kernels.softmax_forward, self.view
        self.run(
            lambda y_, x_: fwd(y_.reshape(view), x_.reshape(view)),
            reads=(x,),
            writes=(y,),
            inplace=((y, x),),
        )
        self.save(y)
        return y

    def backward(self, dy):
        (y,) = self.saved
        dx = self.output(dy.shape, dy.dtype)
        bwd, view = self.kernels.softmax_backward, self.view
        self.run(
            lambda dx_, dy_, y_: bwd(dx_.reshape(view), dy_.reshape(view), y_.reshape(view)),
            reads=(dy, y),
            writes=(dx,),
            inplace=((dx, dy),),
        )
        return dx


def softmax(x, axis=1):
    return SoftMax(axis)(x)
