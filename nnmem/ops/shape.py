"""Shape operators: Flatten (a view, no copy) and Cat (concatenation along an axis).

Cat only moves data: viewed as 2-D (rows = the dimensions before the axis, columns = the
rest), each input is a block of the output's columns, copied by the device's concat kernels.
The output is its own block (the inputs stay alive only as long as something else needs them).
"""

import math

from nnmem.operation import Operator
from nnmem.ops.arith import Reshape
from nnmem.ops.strides import axis_index

__all__ = ["Cat", "Flatten", "cat", "flatten"]


class Flatten(Reshape):
    """(N, d1, d2, ...) -> (N, d1*d2*...) for axis=1: a view on the same block."""

    def __init__(self, axis=1):
        super().__init__(())
        self.axis = axis

    def forward(self, x):
        if not 0 < self.axis <= x.ndim():
            raise ValueError(f"flatten: axis {self.axis} for a {x.ndim()}-D input")
        lead = math.prod(x.shape[: self.axis])
        self.shape = (lead, -1) if lead else (0, math.prod(x.shape[self.axis :]))
        return super().forward(x)


class Cat(Operator):
    """y = concatenate(xs, axis); the gradient is sliced back into one piece per input."""

    def __init__(self, axis=0):
        super().__init__()
        self.axis = axis

    def forward(self, *xs):
        axis = axis_index("concat", self.axis, xs[0].ndim())
        for x in xs[1:]:
            if (
                x.ndim() != xs[0].ndim()
                or x.shape[:axis] + x.shape[axis + 1 :]
                != xs[0].shape[:axis] + xs[0].shape[axis + 1 :]
                or x.dtype != xs[0].dtype
            ):
                raise ValueError(
                    f"cat: shapes {[t.shape for t in xs]} differ outside axis {axis}"
                    " (or their dtypes differ)"
                )
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        y = self.output(tuple(shape), xs[0].dtype)
        rows, trail = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
        columns = [x.shape[axis] * trail for x in xs]
        copy_in = self.kernels.concat_copy_in

        def concatenate(y_, *xs_):
            y2, offset = y_.reshape(rows, sum(columns)), 0
            for x_, cols in zip(xs_, columns):
                copy_in(y2, x_.reshape(rows, cols), offset)
                offset += cols

        self.run(concatenate, reads=xs, writes=(y,))
        self.sizes = [x.shape[axis] for x in xs]
        self.axis, self.rows, self.trail = axis, rows, trail
        return y

    def backward(self, dy):
        dxs, start, rows, trail = [], 0, self.rows, self.trail  # trail: columns per axis unit
        ycols = dy.shape[self.axis] * trail
        copy_out = self.kernels.concat_copy_out
        for size, needed in zip(self.sizes, self.needs_grad):
            if needed:
                shape = dy.shape[: self.axis] + (size,) + dy.shape[self.axis + 1 :]
                dx = self.output(shape, dy.dtype)
                self.run(
                    lambda dx_, dy_, offset=start * trail, cols=size * trail: copy_out(
                        dx_.reshape(rows, cols), dy_.reshape(rows, ycols), offset
                    ),
                    reads=(dy,),
                    writes=(dx,),
                )
                dxs.append(dx)
            else:
                dxs.append(None)
            start += size
        return tuple(dxs)


def flatten(x, axis=1):
    return Flatten(axis)(x)


def cat(xs, axis=0):
    """Concatenate along `axis` (SINGA's default: 0)."""
    return Cat(axis)(*xs)
