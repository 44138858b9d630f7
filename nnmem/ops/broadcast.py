"""Arithmetic and comparisons between tensors of different shapes, broadcast as NumPy does.

y = a <op> b where each axis (aligned from the right) of a and b is equal or 1; a size-1 axis
is read again for every index of the other (stride 0, kernels/cpu/strided.py): nothing is
copied or expanded in memory. The gradient of an input that was broadcast is summed over the
axes it was repeated along (``reduce_to``), so it has the input's shape:

    add: da = dy, db = dy            sub: da = dy, db = -dy
    mul: da = dy * b, db = dy * a    div: da = dy / b, db = -(dy / b) * y    (y = a / b)
    pow: da = dy * b a^(b-1), db = dy * a^b log a
    max: da = dy where a >= b, db = dy elsewhere (ties go to a); min likewise with <=

Equal shapes keep the plain elementwise operators (nnmem/ops/arith.py), which can also work
in place; comparisons and logic (and, or, xor) are constants to autograd (no gradient flows
through a mask).
"""

from nnmem.operation import Operator
from nnmem.ops.arith import Add, Mul, Sub
from nnmem.ops.reduce import summed
from nnmem.ops.strides import broadcast_shape, broadcast_strides, check_rank, pad

__all__ = ["Broadcast", "div"]

DIFFERENTIABLE = ("add", "sub", "mul", "div", "pow", "max", "min")
OPERATIONS = DIFFERENTIABLE + ("gt", "ge", "lt", "le", "eq", "and", "or", "xor")


def binary_map(op, how, a, b, shape):
    """Run broadcast_binary: a new tensor of `shape` = a <how> b."""
    y = op.output(shape, a.dtype)
    kern, code = op.kernels.broadcast_binary, op.kernels.BINARY_CODES[how]
    args = pad(shape, 1), broadcast_strides(a.shape, shape), broadcast_strides(b.shape, shape)
    op.run(
        lambda y_, a_, b_: kern(y_.reshape(-1), a_.reshape(-1), b_.reshape(-1), *args, code),
        reads=(a, b),
        writes=(y,),
    )
    return y


def reduce_to(op, g, shape, scale=1.0):
    """scale * g summed over the axes where `shape` (an input's shape) was broadcast to g's."""
    if tuple(shape) == g.shape and scale == 1.0:
        return g
    kept = (1,) * (g.ndim() - len(shape)) + tuple(shape)
    return summed(op, g, kept, tuple(shape), scale)


class Broadcast(Operator):
    """y = a <op> b with broadcasting, for op in add, sub, mul, div and the comparisons."""

    def __init__(self, how):
        super().__init__(how.capitalize())
        if how not in OPERATIONS:
            raise ValueError(f"unknown binary operation {how!r}; one of {OPERATIONS}")
        self.how = how
        self.differentiable = how in DIFFERENTIABLE

    def forward(self, a, b):
        if a.dtype != b.dtype or a.dtype.kind != "f":
            raise TypeError(
                f"{self.how}: operands have dtypes {a.dtype} and {b.dtype}; both must be the "
                "same float dtype"
            )
        shape = broadcast_shape(self.how, a.shape, b.shape)
        check_rank(self.how, shape)
        y = binary_map(self, self.how, a, b, shape)
        self.shapes = a.shape, b.shape
        if self.how == "mul":
            self.save(a if self.needs_grad[1] else None, b if self.needs_grad[0] else None)
        elif self.how == "div":
            self.save(b, y if self.needs_grad[1] else None)
        elif self.how in ("pow", "max", "min"):
            self.save(a, b)
        return y

    def backward(self, dy):
        (sa, sb), need_a, need_b = self.shapes, *self.needs_grad
        if self.how in ("add", "sub"):
            da = reduce_to(self, dy, sa) if need_a else None
            db = reduce_to(self, dy, sb, -1.0 if self.how == "sub" else 1.0) if need_b else None
            return da, db
        if self.how == "mul":
            a, b = self.saved
            mul = "mul"
            da = reduce_to(self, binary_map(self, mul, dy, b, dy.shape), sa) if need_a else None
            db = reduce_to(self, binary_map(self, mul, dy, a, dy.shape), sb) if need_b else None
            return da, db
        if self.how in ("pow", "max", "min"):
            return self._backward_through(dy, sa, sb, need_a, need_b)
        b, y = self.saved  # div
        t = binary_map(self, "div", dy, b, dy.shape)  # dy / b
        db = None
        if need_b:
            db = reduce_to(self, binary_map(self, "mul", t, y, dy.shape), sb, -1.0)
        return (reduce_to(self, t, sa) if need_a else None), db

    #: (factor for da, factor for db): dy times these, as binary_map operations on (a, b)
    FACTORS = {"pow": ("pow_da", "pow_db"), "max": ("ge", "lt"), "min": ("le", "gt")}

    def _backward_through(self, dy, sa, sb, need_a, need_b):
        a, b = self.saved
        grads = []
        for how, shape, needed in zip(self.FACTORS[self.how], (sa, sb), (need_a, need_b)):
            if not needed:
                grads.append(None)
                continue
            factor = binary_map(self, how, a, b, dy.shape)
            grads.append(reduce_to(self, binary_map(self, "mul", dy, factor, dy.shape), shape))
        return tuple(grads)


_SAME_SHAPE = {"add": Add, "sub": Sub, "mul": Mul}


def binary(how, a, b):
    """a <how> b for tensors a, b: the elementwise operator when the shapes are equal, the
    broadcasting one otherwise."""
    if a.shape == b.shape and how in _SAME_SHAPE:
        return _SAME_SHAPE[how]()(a, b)
    return Broadcast(how)(a, b)


def div(a, b):
    """a / b, broadcast."""
    return Broadcast("div")(a, b)


def compare(a, how, b):
    """1.0 where a <how> b, else 0.0 (how: gt, ge, lt, le, eq, and, or, xor), broadcast; no
    gradient."""
    return Broadcast(how)(a, b)
