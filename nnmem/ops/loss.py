"""Losses, as SINGA's: the target is a constant of the operator (``MeanSquareError(t)(x)``), so
``loss.creator.backward()`` returns dx alone, and its dy defaults to 1.0. Each returns a tensor
of shape (1,).

    softmax_cross_entropy(x, t)  = -sum_n log softmax(x_n)[t_n] / N   (t: ids or one-hot rows)
    mse_loss(x, t)               = sum((x - t)^2) / n                 (n: every element)
    cross_entropy(x, t)          = -sum(t * log(x)) / N               (x: probabilities)
    binary_cross_entropy(x, t)   = -sum(t log(x + 1e-4) + (1 - t) log(1.0001 - x)) / N
    ranking_loss(pos, neg, M)    = sum(max(0, M - pos + neg)) / N

N is the batch size (x.shape[0]); the 1e-4 shifts are SINGA's, so a probability of exactly 0
or 1 gives a finite loss. The first two are kernels of their own; the others are composites
(nnmem/ops/composite.py) of pointwise operators and a sum.
"""

import numpy as np

from nnmem.operation import InputError, Operator, constant
from nnmem.ops.arith import Scale
from nnmem.ops.broadcast import binary
from nnmem.ops.composite import Composite, as_tensor
from nnmem.ops.pointwise import add_scalar, log
from nnmem.ops.reduce import reduce_sum

__all__ = [  # not the composites' classes: SINGA's are called as CrossEntropy(t)(x)[0] (README)
    "MeanSquareError",
    "SoftMaxCrossEntropy",
    "binary_cross_entropy",
    "cross_entropy",
    "mse_loss",
    "ranking_loss",
    "softmax_cross_entropy",
]


def _seed(op, dy):
    """SINGA's losses take dy=1.0 by default: dy as a tensor of the loss's shape."""
    if dy is None or isinstance(dy, (int, float)):
        shape, dtype = op.output_meta[0]
        return constant(shape, dtype, op.device, 1.0 if dy is None else float(dy))
    return dy


def _target(op, x, t):
    if t.device is not x.device:
        raise ValueError(f"{op}: the target lives on {t.device}, x on {x.device}; move one")


class SoftMaxCrossEntropy(Operator):
    """loss = -1/N sum_n log softmax(x_n)[t_n]; dx = (softmax(x) - onehot(t)) / N."""

    def __init__(self, t):
        super().__init__()
        self.t = t

    def forward(self, x):
        (K, t), self.t = (self.kernels, self.t), None  # kept only as backward's saved tensor
        _target("softmax_cross_entropy", x, t)
        if x.ndim() != 2:
            raise ValueError(
                f"softmax_cross_entropy: logits of shape {x.shape}; need (batch, "
                "classes) (add a Flatten/Linear before the loss)"
            )
        n, c = x.shape
        _check_not_empty("softmax_cross_entropy", n)
        _check_float("softmax_cross_entropy", "logits", x)
        if t.shape == (n, 1) and t.dtype.kind == "i" and c != 1:  # SINGA's column of ids
            t = t.reshape((n,))
        if t.shape == (n,):
            if t.dtype.kind != "i":
                raise TypeError(
                    f"softmax_cross_entropy: class-id labels must be int32, not "
                    f"{t.dtype}; copy them with y.astype(np.int32)"
                )
            self.onehot = False
        elif t.shape == (n, c):
            self.onehot = True
        else:
            raise InputError(
                f"softmax_cross_entropy: labels of shape {t.shape} for logits "
                f"{x.shape}; give class ids ({n},) or ({n}, 1), or one-hot rows ({n}, {c})"
            )
        loss, prob = self.output((1,), x.dtype), self.output(x.shape, x.dtype)
        fwd = (
            K.softmax_cross_entropy_forward_onehot
            if self.onehot
            else K.softmax_cross_entropy_forward
        )
        self.run(fwd, reads=(x, t), writes=(loss, prob))
        self.save(prob, t)
        return loss

    def backward(self, dloss=None):
        K, dloss = self.kernels, _seed(self, dloss)
        prob, t = self.saved
        dx = self.output(prob.shape, prob.dtype)
        bwd = (
            K.softmax_cross_entropy_backward_onehot
            if self.onehot
            else K.softmax_cross_entropy_backward
        )
        self.run(bwd, reads=(dloss, prob, t), writes=(dx,))
        return dx


class MeanSquareError(Operator):
    """loss = sum((x - t)^2) / n over the n elements of x (SINGA's); dx = 2 (x - t) dy / n.

    The kernels compute half a mean over rows, 0.5 * sum(err^2) / rows: with one row per
    element and doubled, that is this mean."""

    def __init__(self, t):
        super().__init__()
        self.t = t

    def forward(self, x):
        (K, t), self.t = (self.kernels, self.t), None  # backward reads the error, not t
        _target("mse", x, t)
        if x.shape != t.shape or x.dtype != t.dtype:
            raise InputError(
                f"mse: prediction {x.shape} {x.dtype} and target {t.shape} {t.dtype}"
                " must have the same shape and dtype"
            )
        _check_not_empty("mse", x.size())
        _check_float("mse", "predictions", x)
        self.rows = rows = (x.size(), 1)
        loss, err = self.output((1,), x.dtype), self.output(x.shape, x.dtype)

        def kernel(loss_, err_, x_, t_):
            K.mse_forward(loss_, err_.reshape(rows), x_.reshape(rows), t_.reshape(rows))
            K.scale(loss_, 2.0)

        self.run(kernel, reads=(x, t), writes=(loss, err))
        self.save(err)
        return loss

    def backward(self, dloss=None):
        K, dloss, rows = self.kernels, _seed(self, dloss), self.rows
        (err,) = self.saved
        dx = self.output(err.shape, err.dtype)

        def kernel(dx_, dloss_, err_):
            K.mse_backward(dx_.reshape(rows), dloss_, err_.reshape(rows))
            K.scale(dx_.reshape(-1), 2.0)

        self.run(kernel, reads=(dloss, err), writes=(dx,), inplace=((dx, err),))
        return dx


def _batch(op, x, t):
    if x.shape != t.shape:
        raise InputError(
            f"{op}: prediction {x.shape} and target {t.shape} must have the same shape "
            "(one-hot or probability targets)"
        )
    if t.dtype != x.dtype:
        raise TypeError(
            f"{op}: target dtype {t.dtype} differs from the prediction's {x.dtype}; "
            f"copy the target into a {x.dtype} tensor"
        )
    return x.shape[0] if x.ndim() else 1


class CrossEntropy(Composite):
    """-sum(t * log(x)) / N; dx = -t / (x N) dy."""

    def compose(self, x, t):
        n = _batch("cross_entropy", x, t)
        return Scale(-1.0 / n)(reduce_sum(binary("mul", t, log(x)), keepdims=False).reshape((1,)))

    def backward(self, dy=None):
        return super().backward(_seed(self, dy))


class BinaryCrossEntropy(Composite):
    """-sum(t log(x + 1e-4) + (1 - t) log(1.0001 - x)) / N (SINGA's shifts)."""

    def compose(self, x, t):
        n = _batch("binary_cross_entropy", x, t)
        positive = binary("mul", t, log(add_scalar(x, 1e-4)))
        not_t = add_scalar(Scale(-1.0)(t), 1.0)
        negative = binary("mul", not_t, log(add_scalar(Scale(-1.0)(x), 1.0001)))
        total = reduce_sum(binary("add", positive, negative), keepdims=False)
        return Scale(-1.0 / n)(total.reshape((1,)))

    def backward(self, dy=None):
        return super().backward(_seed(self, dy))


class RankingLoss(Composite):
    """sum(max(0, M - pos + neg)) / N: a positive should score M above its negative."""

    def compose(self, pos, neg, M):
        if pos.shape != neg.shape:
            raise InputError(
                f"ranking_loss: positive scores {pos.shape} and negative scores {neg.shape} "
                "must have the same shape (one negative per positive)"
            )
        margin = add_scalar(binary("sub", neg, pos), M)
        zero = as_tensor(np.zeros((1,) * margin.ndim()), margin)
        total = reduce_sum(binary("max", margin, zero), keepdims=False)
        return Scale(1.0 / pos.shape[0])(total.reshape((1,)))

    def backward(self, dy=None):
        return super().backward(_seed(self, dy))


def _check_float(op, what, x):
    """A loss is a float: int32 inputs would give a truncated, int32 loss."""
    if x.dtype.kind != "f":
        raise TypeError(f"{op}: {what} must be a float tensor, not {x.dtype}; convert them first")


def _check_not_empty(loss, n):
    if n == 0:
        raise ValueError(
            f"{loss}: an empty batch (0 samples) has no mean loss; give at least one sample"
        )


def softmax_cross_entropy(x, t):
    return SoftMaxCrossEntropy(t)(x)


def mse_loss(x, t):
    return MeanSquareError(t)(x)


def cross_entropy(x, t):
    return CrossEntropy(t=t)(x)


def binary_cross_entropy(x, t):
    return BinaryCrossEntropy(t=t)(x)


def ranking_loss(pos, neg, M=0.2):
    return RankingLoss(M=M)(pos, neg)
