"""Losses: softmax cross-entropy (labels as class ids or one-hot rows) and mean squared error.
Both return a tensor of shape (1,) holding the mean over the batch."""

from nnmem.operation import Operator

__all__ = ["MeanSquareError", "SoftMaxCrossEntropy", "mse_loss", "softmax_cross_entropy"]


class SoftMaxCrossEntropy(Operator):
    """loss = -1/N sum_n log softmax(x_n)[t_n]; dx = (softmax(x) - onehot(t)) / N."""

    def forward(self, x, t):
        K = self.kernels
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
            raise ValueError(
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

    def backward(self, dloss):
        K = self.kernels
        prob, t = self.saved
        dx = self.output(prob.shape, prob.dtype)
        bwd = (
            K.softmax_cross_entropy_backward_onehot
            if self.onehot
            else K.softmax_cross_entropy_backward
        )
        self.run(bwd, reads=(dloss, prob, t), writes=(dx,))
        return dx, None


class MeanSquareError(Operator):
    """loss = 0.5 * sum((x - t)^2) / N with N = x.shape[0] (SINGA's); dx = (x - t) / N."""

    def forward(self, x, t):
        K = self.kernels
        if x.shape != t.shape or x.dtype != t.dtype:
            raise ValueError(
                f"mse: prediction {x.shape} {x.dtype} and target {t.shape} {t.dtype}"
                " must have the same shape and dtype"
            )
        n = x.shape[0] if x.ndim() else 1
        _check_not_empty("mse", n)
        _check_float("mse", "predictions", x)
        shape2d = (n, x.size() // max(n, 1))
        loss, err = self.output((1,), x.dtype), self.output(x.shape, x.dtype)
        self.run(
            lambda loss_, err_, x_, t_: K.mse_forward(
                loss_, err_.reshape(shape2d), x_.reshape(shape2d), t_.reshape(shape2d)
            ),
            reads=(x, t),
            writes=(loss, err),
        )
        self.save(err)
        self.shape2d = shape2d
        return loss

    def backward(self, dloss):
        K = self.kernels
        (err,) = self.saved
        dx = self.output(err.shape, err.dtype)
        shape2d = self.shape2d
        self.run(
            lambda dx_, dloss_, err_: K.mse_backward(
                dx_.reshape(shape2d), dloss_, err_.reshape(shape2d)
            ),
            reads=(dloss, err),
            writes=(dx,),
            inplace=((dx, err),),
        )
        return dx, None


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
    return SoftMaxCrossEntropy()(x, t)


def mse_loss(x, t):
    return MeanSquareError()(x, t)
