"""Pointwise functions of one tensor: tanh, exp, log, trigonometry, erf, softplus, ELU, GELU, ...,
rounding and comparisons with a scalar (kernels/cpu/unary.py's table).

Each saves only what its derivative reads: y for tanh, exp, sqrt and 1/x (so its forward may
overwrite x in place when nothing else reads x, as ReLU's does), x for the others. Sign and
rounding have a zero derivative almost everywhere: they are recorded, so that SINGA's
``y.creator.backward(dy)`` gives their zeros, but no gradient flows through them
(Operator.gradient_is_zero). The comparisons are constants to autograd: they make masks.
"""

from nnmem.operation import SAME, Operator

__all__ = [
    "Pointwise",
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "ceil",
    "clip",
    "cos",
    "cosh",
    "elu",
    "erf",
    "exp",
    "floor",
    "gelu",
    "hardsigmoid",
    "leakyrelu",
    "log",
    "reciprocal",
    "round",
    "rounde",
    "selu",
    "sign",
    "sin",
    "sinh",
    "softplus",
    "softsign",
    "sqrt",
    "square",
    "tan",
    "tanh",
]

#: What each function's derivative reads: "x", "y" or nothing (x + a); a function missing here
#: (sign, rounding, the comparisons) has no gradient.
GRADIENT_READS = {"tanh": "y", "exp": "y", "log": "x", "square": "x", "sqrt": "y", "abs": "x"}
GRADIENT_READS.update(leakyrelu="x", reciprocal="y", pow="x", add_scalar=None, tan="y")
GRADIENT_READS.update({f: "x" for f in "sin cos sinh cosh asin acos atan asinh acosh".split()})
GRADIENT_READS.update(atanh="x", erf="x", softplus="x", softsign="x", hardsigmoid="x", clip="x")
GRADIENT_READS.update(elu="both", selu="both", gelu="x", gelu_tanh="x")
COMPARISONS = ("gt", "ge", "lt", "le", "eq")
#: The functions whose derivative is zero wherever it is defined.
ZERO_GRADIENT = ("sign", "ceil", "floor", "round", "rounde")


class Pointwise(Operator):
    """y = f(x; alpha) for one of the kernels' functions, by name (kernels/cpu/unary.py)."""

    def __init__(self, fn, a=0.0, b=0.0):
        super().__init__(fn.capitalize())
        self.fn, self.a, self.b = fn, float(a), float(b)
        self.differentiable = fn in GRADIENT_READS or fn in ZERO_GRADIENT
        self.gradient_is_zero = fn in ZERO_GRADIENT
        self.grad_reads = GRADIENT_READS.get(fn)

    def forward(self, x):
        if x.dtype.kind != "f":
            raise TypeError(f"{self.name}: needs a float tensor, not {x.dtype}")
        y = self.output(x.shape, x.dtype)
        self.code = code = self.kernels.UNARY_CODES[self.fn]
        fwd, a, b = self.kernels.unary_forward, self.a, self.b
        self.run(
            lambda y_, x_: fwd(y_.reshape(-1), x_.reshape(-1), code, a, b),
            reads=(x,),
            writes=(y,),
            inplace=((y, x),) if self.grad_reads in ("y", None) else (),
            rebuild=SAME,
        )
        reads = self.grad_reads
        self.save(x if reads in ("x", "both") else None, y if reads in ("y", "both") else None)
        return y

    def backward(self, dy):
        if self.gradient_is_zero:
            dx, fill = self.output(dy.shape, dy.dtype), self.kernels.fill
            self.run(lambda dx_: fill(dx_.reshape(-1), 0.0), reads=(), writes=(dx,))
            return dx
        x, y = self.saved  # the kernel reads the ones its derivative needs: pass any for the rest
        if x is None and y is None:  # x + a: its derivative reads neither
            x = y = dy
        x, y = (y if x is None else x), (x if y is None else y)
        dx = self.output(dy.shape, dy.dtype)
        bwd, code, a, b = self.kernels.unary_backward, self.code, self.a, self.b
        self.run(
            lambda dx_, dy_, x_, y_: bwd(dx_.reshape(-1), dy_.reshape(-1), x_.reshape(-1),
                                         y_.reshape(-1), code, a, b),
            reads=(dy, x, y),
            writes=(dx,),
            inplace=((dx, dy),),
        )  # fmt: skip
        return dx


def _pointwise(fn):
    def apply(x):
        return Pointwise(fn)(x)

    apply.__name__ = fn
    apply.__doc__ = f"{fn}(x), elementwise (kernels/cpu/unary.py)."
    return apply


tanh = _pointwise("tanh")
exp = _pointwise("exp")
log = _pointwise("log")
square = _pointwise("square")
sqrt = _pointwise("sqrt")
abs = _pointwise("abs")  # noqa: A001 (SINGA's name)
reciprocal = _pointwise("reciprocal")
sign = _pointwise("sign")
sin, cos, tan = _pointwise("sin"), _pointwise("cos"), _pointwise("tan")
sinh, cosh = _pointwise("sinh"), _pointwise("cosh")
asin, acos, atan = _pointwise("asin"), _pointwise("acos"), _pointwise("atan")
asinh, acosh, atanh = _pointwise("asinh"), _pointwise("acosh"), _pointwise("atanh")
erf, softplus, softsign = _pointwise("erf"), _pointwise("softplus"), _pointwise("softsign")
ceil, floor = _pointwise("ceil"), _pointwise("floor")
round, rounde = _pointwise("round"), _pointwise("rounde")  # noqa: A001 (SINGA's name)


def elu(x, alpha=1.0):
    """x where x > 0, alpha * (e^x - 1) elsewhere."""
    return Pointwise("elu", alpha)(x)


def selu(x, alpha=1.67326, gamma=1.0507):
    """gamma * x where x > 0, gamma * alpha * (e^x - 1) elsewhere (SINGA's defaults)."""
    return Pointwise("selu", alpha, gamma)(x)


def hardsigmoid(x, alpha=0.2, gamma=0.5):
    """clip(alpha * x + gamma, 0, 1)."""
    return Pointwise("hardsigmoid", alpha, gamma)(x)


def clip(x, min=None, max=None):  # noqa: A002 (SINGA's names)
    """x limited to [min, max] (None: no limit on that side); the gradient flows inside."""
    low = -float("inf") if min is None else min
    high = float("inf") if max is None else max
    return Pointwise("clip", low, high)(x)


def gelu(x, approximate="none"):
    """x * Phi(x), Phi the standard normal's CDF (ONNX Gelu, opset 20): exact with erf
    ("none"), or with tanh ("tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))))."""
    codes = {"none": "gelu", "tanh": "gelu_tanh"}
    if approximate not in codes:
        raise ValueError(f"gelu: approximate={approximate!r}; give 'none' (erf) or 'tanh'")
    return Pointwise(codes[approximate])(x)


def leakyrelu(x, a=0.01):
    """x where x >= 0, a * x elsewhere."""
    return Pointwise("leakyrelu", a)(x)


def pow_scalar(x, a):
    """x ** a for a Python number a."""
    return Pointwise("pow", a)(x)


def add_scalar(x, a):
    """x + a for a Python number a."""
    return Pointwise("add_scalar", a)(x)


def compare_scalar(x, how, a):
    """1.0 where x <how> a holds, else 0.0 (how: gt, ge, lt, le, eq); no gradient."""
    if how not in COMPARISONS:
        raise ValueError(f"unknown comparison {how!r}; one of {COMPARISONS}")
    return Pointwise(how, a)(x)
