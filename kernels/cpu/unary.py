"""Elementwise functions of one tensor, chosen by a code: y = f(x; a, b) and its gradient.

One pair of kernels serves every pointwise function SINGA's autograd and tensor modules have
beyond ReLU and Sigmoid (which keep their own, older kernels). The gradient kernel receives
both the forward input x and output y and uses whichever the derivative is cheapest in:

    code         y = f(x)                        dx = dy * f'(x)
    TANH         tanh(x)                         dy * (1 - y^2)
    EXP          exp(x)                          dy * y
    LOG          log(x)                          dy / x
    SQUARE       x^2                             dy * 2x
    SQRT         sqrt(x)                         dy * 0.5 / y
    ABS          |x|                             dy * sign(x)
    LEAKYRELU    x if x >= 0 else a*x            dy if x >= 0 else a*dy
    RECIPROCAL   1 / x                           -dy * y^2
    POW          x^a                             dy * a * x^(a-1)
    ADD_SCALAR   x + a                           dy
    SIN, COS, TAN, SINH, COSH, ASIN, ACOS, ATAN, ASINH, ACOSH, ATANH, ERF: the functions of
                 math, with their derivatives (tan: dy * (1 + y^2); erf: dy * 2/sqrt(pi) e^-x^2)
    SOFTPLUS     log(1 + e^x)                    dy * sigmoid(x)
    SOFTSIGN     x / (1 + |x|)                   dy / (1 + |x|)^2
    ELU          x if x > 0 else a(e^x - 1)      dy if x > 0 else dy * (y + a)
    SELU         b*x if x > 0 else a*b(e^x - 1)  dy * b if x > 0 else dy * (y + a*b)
    HARDSIGMOID  clip(a*x + b, 0, 1)             dy * a inside (0, 1), else 0
    CLIP         clip(x, a, b)                   dy inside [a, b], else 0
    GELU         x Phi(x) = x (1 + erf(x / sqrt2)) / 2
                                                 dy * (Phi(x) + x phi(x))   (phi: normal pdf)
    GELU_TANH    x (1 + t) / 2, t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3) (ONNX's "tanh")
                                                 dy * ((1 + t) / 2 + x (1 - t^2) u' / 2)
    SIGN, CEIL, FLOOR, ROUND (halves away from 0), ROUNDE (halves to even), and the comparisons
    GT, GE, LT, LE, EQ with the scalar a (1.0 or 0.0): flat almost everywhere, gradient 0.

Flat 1-D arrays (``a.reshape(-1)``), in-place safe (out may be an input), bit-identical on
every call, no allocation; compiled serial for the reason kernels/cpu/elementwise.py gives.
"""

import math

from numba import prange

from ._jit import njit

# The codes of kernels/contract.py's UNARY_CODES, by name (a test checks they agree).
(TANH, EXP, LOG, SQUARE, SQRT, ABS, LEAKYRELU, RECIPROCAL, POW, ADD_SCALAR) = range(10)
(SIN, COS, TAN, SINH, COSH, ASIN, ACOS, ATAN, ASINH, ACOSH, ATANH, ERF) = range(10, 22)
(SOFTPLUS, SOFTSIGN, ELU, SELU, HARDSIGMOID, CLIP) = range(22, 28)
(SIGN, CEIL, FLOOR, ROUND, ROUNDE, GT, GE, LT, LE, EQ) = range(28, 38)
(GELU, GELU_TANH) = range(38, 40)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
SQRT_HALF = math.sqrt(0.5)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715  # the tanh approximation's coefficient (Hendrycks and Gimpel; ONNX Gelu)


def _unary_value(v, code, a, b):
    if code == TANH:
        return math.tanh(v)
    if code == EXP:
        return math.exp(v)
    if code == LOG:
        return math.log(v) if v > 0 else (-math.inf if v == 0 else math.nan)
    if code == SQUARE:
        return v * v
    if code == SQRT:
        return math.sqrt(v) if v >= 0 else math.nan
    if code == ABS:
        return abs(v)
    if code == LEAKYRELU:
        return v if v >= 0 else a * v
    if code == RECIPROCAL:
        return 1.0 / v if v != 0 else math.copysign(math.inf, v)
    if code == POW:
        return v**a
    if code == ADD_SCALAR:
        return v + a
    if code == SIN:
        return math.sin(v)
    if code == COS:
        return math.cos(v)
    if code == TAN:
        return math.tan(v)
    if code == SINH:
        return math.sinh(v)
    if code == COSH:
        return math.cosh(v)
    if code == ASIN:
        return math.asin(v) if -1 <= v <= 1 else math.nan
    if code == ACOS:
        return math.acos(v) if -1 <= v <= 1 else math.nan
    if code == ATAN:
        return math.atan(v)
    if code == ASINH:
        return math.asinh(v)
    if code == ACOSH:
        return math.acosh(v) if v >= 1 else math.nan
    if code == ATANH:
        return (
            math.atanh(v)
            if -1 < v < 1
            else (math.copysign(math.inf, v) if abs(v) == 1 else math.nan)
        )
    if code == ERF:
        return math.erf(v)
    if code == SOFTPLUS:
        return max(v, 0.0) + math.log1p(math.exp(-abs(v)))  # no overflow for large x
    if code == SOFTSIGN:
        return v / (1 + abs(v))
    if code == ELU:
        return v if v > 0 else a * math.expm1(v)
    if code == SELU:
        return b * v if v > 0 else a * b * math.expm1(v)
    if code == HARDSIGMOID:
        return min(max(a * v + b, 0.0), 1.0)
    if code == CLIP:
        return min(max(v, a), b)
    if code == SIGN:
        return 1.0 if v > 0 else (-1.0 if v < 0 else 0.0)
    if code == CEIL:
        return math.ceil(v)
    if code == FLOOR:
        return math.floor(v)
    if code == ROUND:
        return math.copysign(math.floor(abs(v) + 0.5), v)
    if code == ROUNDE:  # written out: a call here would not compile for the GPU twin
        r = math.floor(v)
        d = v - r
        return r + 1.0 if d > 0.5 or (d == 0.5 and r % 2 != 0) else r
    if code == GELU:
        return 0.5 * v * (1.0 + math.erf(v * SQRT_HALF))
    if code == GELU_TANH:
        return 0.5 * v * (1.0 + math.tanh(SQRT_2_OVER_PI * (v + GELU_CUBIC * v * v * v)))
    if code == GT:
        return 1.0 if v > a else 0.0
    if code == GE:
        return 1.0 if v >= a else 0.0
    if code == LT:
        return 1.0 if v < a else 0.0
    if code == LE:
        return 1.0 if v <= a else 0.0
    return 1.0 if v == a else 0.0  # EQ


def _unary_gradient(g, v, w, code, a, b):
    """dx for one element: g = dy, v = x, w = y."""
    if code == TANH:
        return g * (1 - w * w)
    if code == EXP:
        return g * w
    if code == LOG:
        return g / v
    if code == SQUARE:
        return g * 2 * v
    if code == SQRT:
        return g * 0.5 / w
    if code == ABS:
        return g if v > 0 else (-g if v < 0 else 0.0 * g)
    if code == LEAKYRELU:
        return g if v >= 0 else a * g
    if code == RECIPROCAL:
        return -g * w * w
    if code == POW:
        return g * a * v ** (a - 1)
    if code == ADD_SCALAR:
        return g
    if code == SIN:
        return g * math.cos(v)
    if code == COS:
        return -g * math.sin(v)
    if code == TAN:
        return g * (1 + w * w)
    if code == SINH:
        return g * math.cosh(v)
    if code == COSH:
        return g * math.sinh(v)
    if code == ASIN:
        return g / math.sqrt(1 - v * v)
    if code == ACOS:
        return -g / math.sqrt(1 - v * v)
    if code == ATAN:
        return g / (1 + v * v)
    if code == ASINH:
        return g / math.sqrt(v * v + 1)
    if code == ACOSH:
        return g / math.sqrt(v * v - 1)
    if code == ATANH:
        return g / (1 - v * v)
    if code == ERF:
        return g * TWO_OVER_SQRT_PI * math.exp(-v * v)
    if code == SOFTPLUS:
        return g / (1 + math.exp(-v)) if v >= 0 else g * math.exp(v) / (1 + math.exp(v))
    if code == SOFTSIGN:
        d = 1 + abs(v)
        return g / (d * d)
    if code == ELU:
        return g if v > 0 else g * (w + a)
    if code == SELU:
        return g * b if v > 0 else g * (w + a * b)
    if code == HARDSIGMOID:
        t = a * v + b
        return g * a if 0 < t < 1 else 0.0 * g
    if code == CLIP:
        return g if a <= v <= b else 0.0 * g
    if code == GELU:
        return g * (
            0.5 * (1.0 + math.erf(v * SQRT_HALF)) + v * INV_SQRT_2PI * math.exp(-0.5 * v * v)
        )
    if code == GELU_TANH:
        t = math.tanh(SQRT_2_OVER_PI * (v + GELU_CUBIC * v * v * v))
        du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * v * v)
        return g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du)
    return 0.0 * g  # SIGN, rounding and the comparisons are flat almost everywhere


unary_value = njit(cache=True)(_unary_value)
unary_gradient = njit(cache=True)(_unary_gradient)


def _unary_forward(y, x, code, a, b):
    """y = f(x; a, b) for the function `code` (see the table above). Writes y; in-place safe."""
    if y.size != x.size:
        raise ValueError("unary_forward: y and x must have the same number of elements")
    for i in prange(x.size):
        y[i] = unary_value(x[i], code, a, b)


def _unary_backward(dx, dy, x, y, code, a, b):
    """dx = dy * f'(x) for the function `code`, from the forward input x and output y (pass
    either twice when the derivative reads only one). Writes dx; in-place safe over dy."""
    if not dx.size == dy.size == x.size == y.size:
        raise ValueError("unary_backward: dx, dy, x and y must have the same number of elements")
    for i in prange(dy.size):
        dx[i] = unary_gradient(dy[i], x[i], y[i], code, a, b)


unary_forward = njit(cache=True)(_unary_forward)
unary_backward = njit(cache=True)(_unary_backward)
