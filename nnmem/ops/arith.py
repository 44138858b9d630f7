"""Elementwise arithmetic and reshaping: y = a + b, a - b, a * b (tensor or scalar), views."""
from nnmem.autograd import Operator
from nnmem.kernels import cpu as K


def flat(t):
    """The tensor's pool bytes as a flat 1-D array (what elementwise kernels take)."""
    return t.raw.reshape(-1)


def _check_same_shape(op, a, b):
    if a.shape != b.shape:
        raise ValueError(f"{op}: operands have shapes {a.shape} and {b.shape}; elementwise "
                         "operations need equal shapes (reshape one, or use add_bias for a bias)")
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: operands have dtypes {a.dtype} and {b.dtype}; make them equal")


class Add(Operator):
    """y = a + b; the gradient flows unchanged into both inputs."""

    def forward(self, a, b):
        _check_same_shape("add", a, b)
        y = self.output(a.shape, a.dtype)
        self.run(lambda: K.add(flat(y), flat(a), flat(b)), reads=(a, b), writes=(y,))
        return y

    def backward(self, dy):
        return dy, dy


class Sub(Operator):
    """y = a - b."""

    def forward(self, a, b):
        _check_same_shape("sub", a, b)
        y = self.output(a.shape, a.dtype)
        self.run(lambda: K.sub(flat(y), flat(a), flat(b)), reads=(a, b), writes=(y,))
        return y

    def backward(self, dy):
        db = self.output(dy.shape, dy.dtype) if self.needs_grad[1] else None
        if db is not None:
            self.run(lambda: (K.fill(flat(db), 0), K.axpy(flat(db), -1.0, flat(dy))),
                     reads=(dy,), writes=(db,))
        return dy, db


class Mul(Operator):
    """y = a * b elementwise; da = dy * b, db = dy * a."""

    def forward(self, a, b):
        _check_same_shape("mul", a, b)
        y = self.output(a.shape, a.dtype)
        self.run(lambda: K.mul(flat(y), flat(a), flat(b)), reads=(a, b), writes=(y,))
        self.save(a, b)
        return y

    def backward(self, dy):
        a, b = self.saved
        grads = []
        for other, needed in ((b, self.needs_grad[0]), (a, self.needs_grad[1])):
            if not needed:
                grads.append(None)
                continue
            d = self.output(dy.shape, dy.dtype)
            self.run(lambda d=d, other=other: K.mul(flat(d), flat(dy), flat(other)),
                     reads=(dy, other), writes=(d,))
            grads.append(d)
        return tuple(grads)


class Scale(Operator):
    """y = alpha * x for a Python scalar alpha."""

    def __init__(self, alpha):
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, x):
        return self._scaled(x)

    def backward(self, dy):
        return self._scaled(dy)

    def _scaled(self, x):
        y = self.output(x.shape, x.dtype)
        self.run(lambda: (K.copy(flat(y), flat(x)), K.scale(flat(y), self.alpha)),
                 reads=(x,), writes=(y,))
        return y


class Reshape(Operator):
    """A view with another shape: no data moves, the output shares the input's block."""

    def __init__(self, shape):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x):
        from nnmem.tensor import Tensor
        shape = _resolve_shape(self.shape, x.size())
        self.in_shape = x.shape
        return Tensor._on_block(x.block, shape, x.dtype, x.device)

    def backward(self, dy):
        from nnmem.tensor import Tensor
        return Tensor._on_block(dy.block, self.in_shape, dy.dtype, dy.device)


def _resolve_shape(shape, size):
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if list(shape).count(-1) > 1 or (-1 in shape and (known == 0 or size % known)) or \
            (-1 not in shape and known != size):
        raise ValueError(f"cannot reshape {size} elements into {shape}")
    return tuple(size // known if s == -1 else s for s in shape)


def add(a, b):
    return Add()(a, b)


def sub(a, b):
    return Sub()(a, b)


def mul(a, b):
    """a * b for two tensors of one shape, or a tensor and a Python scalar."""
    if isinstance(b, (int, float)):
        return Scale(b)(a)
    if isinstance(a, (int, float)):
        return Scale(a)(b)
    return Mul()(a, b)


def reshape(x, shape):
    return Reshape(shape)(x)
