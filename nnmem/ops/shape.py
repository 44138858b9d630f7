"""Shape operators: Flatten (a view, no copy), Cat (concatenation along an axis) and Split (its
inverse: pieces along an axis).

Cat and Split only move data: viewed as 2-D (rows = the dimensions before the axis, columns =
the rest), each piece is a block of the whole's columns, copied by the device's concat kernels.
Each output is its own block (the inputs stay alive only as long as something else needs them).
Split's backward is a concatenation of the pieces' gradients, Cat's a split of its gradient.
"""

import math

from nnmem.operation import Operator
from nnmem.ops.arith import Reshape
from nnmem.ops.strides import axis_index

__all__ = ["Cat", "Flatten", "cat", "flatten"]  # not Split: SINGA's is called as Split()(x)[0]


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
        self.run(_concatenate(self.kernels, rows, columns), reads=xs, writes=(y,))
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


class Split(Operator):
    """Pieces of x along `axis`, of the sizes in `parts`; dx = the pieces' gradients
    concatenated (SINGA's Split)."""

    def __init__(self, axis, parts):
        super().__init__()
        self.axis, self.parts = axis, tuple(int(p) for p in parts)

    def forward(self, x):
        axis = axis_index("split", self.axis, x.ndim())
        if any(p < 0 for p in self.parts) or sum(self.parts) != x.shape[axis]:
            raise ValueError(f"split: parts {list(self.parts)} do not add up to {x.shape[axis]}")
        rows, trail = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1 :])
        self.columns = columns = [p * trail for p in self.parts]
        self.x_shape, self.rows = x.shape, rows
        pieces = tuple(
            self.output(x.shape[:axis] + (p,) + x.shape[axis + 1 :], x.dtype) for p in self.parts
        )
        copy_out = self.kernels.concat_copy_out

        def split(*arrays):
            *pieces_, x_ = arrays
            x2, offset = x_.reshape(rows, sum(columns)), 0
            for piece_, cols in zip(pieces_, columns):
                copy_out(piece_.reshape(rows, cols), x2, offset)
                offset += cols

        self.run(split, reads=(x,), writes=pieces)
        return pieces

    def backward(self, *dys):
        dx = self.output(self.x_shape, dys[0].dtype)
        self.run(_concatenate(self.kernels, self.rows, self.columns), reads=dys, writes=(dx,))
        return dx


def _concatenate(K, rows, columns):
    """The kernel function y_ = the xs_ side by side, each viewed as (rows, its columns)."""

    def concatenate(y_, *xs_):
        y2, offset = y_.reshape(rows, sum(columns)), 0
        for x_, cols in zip(xs_, columns):
            K.concat_copy_in(y2, x_.reshape(rows, cols), offset)
            offset += cols

    return concatenate


def flatten(x, axis=1):
    return Flatten(axis)(x)


def cat(xs, axis=0):
    """Concatenate along `axis` (SINGA's default: 0)."""
    return Cat(axis)(*xs)
