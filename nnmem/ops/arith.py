"""Elementwise arithmetic of equal shapes and reshaping: y = a + b, a - b, a * b, alpha * x,
views. (Broadcast shapes and Python numbers: nnmem/ops/broadcast.py and tensor_functions.py.)

Kernel functions receive NumPy arrays from the device, outputs first: ``fn(*writes, *reads)``.
Elementwise kernels take flat arrays, hence the ``.reshape(-1)`` (a view, no copy).
"""

from nnmem.operation import Operator
from nnmem.tensor import Tensor

__all__ = ["Add", "Mul", "Reshape", "Scale", "Sub", "reshape"]


def _check_same_shape(op, a, b):
    if a.shape != b.shape:
        raise ValueError(
            f"{op}: operands have shapes {a.shape} and {b.shape}; elementwise "
            "operations need equal shapes (reshape one, or use add_bias for a bias)"
        )
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: operands have dtypes {a.dtype} and {b.dtype}; make them equal")


def _binary(op, kernel, a, b, tag=None):
    """y = kernel(a, b) elementwise; y may take the memory of a input whose last use this is.
    `tag`: what the call computes, for graph mode's fusion pass (Operator.run)."""
    y = op.output(a.shape, a.dtype)
    op.run(
        lambda y_, a_, b_: kernel(y_.reshape(-1), a_.reshape(-1), b_.reshape(-1)),
        reads=(a, b),
        writes=(y,),
        inplace=((y, a), (y, b)),
        tag=tag,
    )
    return y


class Add(Operator):
    """y = a + b; the gradient flows unchanged into both inputs."""

    def forward(self, a, b):
        K = self.kernels
        _check_same_shape("add", a, b)
        return _binary(self, K.add, a, b, tag=("add",))

    def backward(self, dy):
        return dy, dy


class Sub(Operator):
    """y = a - b; da = dy, db = -dy."""

    def forward(self, a, b):
        K = self.kernels
        _check_same_shape("sub", a, b)
        return _binary(self, K.sub, a, b)

    def backward(self, dy):
        return dy, (_scaled(self, dy, -1.0) if self.needs_grad[1] else None)


class Mul(Operator):
    """y = a * b elementwise; da = dy * b, db = dy * a."""

    def forward(self, a, b):
        K = self.kernels
        _check_same_shape("mul", a, b)
        self.save(a, b)
        return _binary(self, K.mul, a, b)

    def backward(self, dy):
        K = self.kernels
        a, b = self.saved
        da = _binary(self, K.mul, dy, b) if self.needs_grad[0] else None
        db = _binary(self, K.mul, dy, a) if self.needs_grad[1] else None
        return da, db


class Scale(Operator):
    """y = alpha * x for a Python scalar alpha."""

    def __init__(self, alpha):
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, x):
        if x.dtype.kind != "f" and not self.alpha.is_integer():
            raise TypeError(
                f"scale: {x.dtype} times {self.alpha:g} (or divided) would be truncated to "
                f"{x.dtype}; convert the tensor to a float one first"
            )
        return _scaled(self, x, self.alpha)

    def backward(self, dy):
        return _scaled(self, dy, self.alpha)


def _scaled(op, x, alpha):
    K = op.kernels
    y = op.output(x.shape, x.dtype)

    def kernel(y_, x_):
        K.copy(y_.reshape(-1), x_.reshape(-1))
        K.scale(y_.reshape(-1), alpha)

    op.run(kernel, reads=(x,), writes=(y,), inplace=((y, x),))
    return y


class Cast(Operator):
    """y = x converted to `dtype` (SINGA's AsType): a float becomes an int by truncation
    toward zero. A constant to autograd, as SINGA's ``as_type`` is: no gradient flows through
    it (an int tensor carries none; a float-to-float cast that must pass one is autograd.cast's
    copy). The output is a new tensor, also for the tensor's own dtype."""

    differentiable = False

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x):
        y = self.output(x.shape, self.dtype)
        cast = self.kernels.cast
        self.run(lambda y_, x_: cast(y_.reshape(-1), x_.reshape(-1)), reads=(x,), writes=(y,))
        return y


class Reshape(Operator):
    """A view with another shape: no data moves, the output shares the input's block."""

    def __init__(self, shape):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x):
        shape = _resolve_shape(self.shape, x.size())
        self.in_shape = x.shape
        return Tensor._on_block(x.block, shape, x.dtype, x.device)

    def backward(self, dy):
        return Tensor._on_block(dy.block, self.in_shape, dy.dtype, dy.device)


def _resolve_shape(shape, size):
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if (
        list(shape).count(-1) > 1
        or (-1 in shape and (known == 0 or size % known))
        or (-1 not in shape and known != size)
    ):
        raise ValueError(f"cannot reshape {size} elements into {shape}")
    return tuple(size // known if s == -1 else s for s in shape)


def reshape(x, shape):
    return Reshape(shape)(x)
