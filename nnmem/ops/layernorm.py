"""Layer normalisation (ONNX LayerNormalization): each sample normalised over its last axes.

With the axes from `axis` to the end flattened into n features and the ones before into rows:

    y = (x - mean) / sqrt(var + epsilon) * scale + bias       (mean, var: per row, over n)

scale and bias have the shape x.shape[axis:] (bias optional). The kernels are
kernels/cpu/layernorm.py's (the maths of the gradients is written there); the bias is added to
every row by add_bias_rows, and its gradient is dy summed over the rows (sum_rows).

Memory contract: the forward writes y and, per row, the mean and 1/sqrt(var + epsilon) (rstd),
2 numbers a row. Backward keeps x (a transformer keeps it anyway: it is the residual stream the
next addition reads), mean and rstd, and scale when x needs a gradient; it never keeps y or
x-hat (a second x-sized tensor), which the gradient kernels rebuild from x, mean and rstd.
"""

import math

import numpy as np

from nnmem.operation import Operator
from nnmem.ops.strides import axis_index

__all__ = ["LayerNorm", "layer_norm"]


class LayerNorm(Operator):
    """y = (x - mean) * rstd * scale + bias over the axes from `axis` on; differentiable in x,
    scale and bias."""

    def __init__(self, axis=-1, epsilon=1e-5):
        super().__init__()
        self.axis, self.epsilon = int(axis), float(epsilon)

    def forward(self, x, scale, bias=None):
        K = self.kernels
        if x.dtype.kind != "f":
            raise TypeError(f"layer_norm: needs a float tensor, not {x.dtype}")
        axis = axis_index("layer_norm", self.axis, x.ndim())
        features = x.shape[axis:]
        for name, p in (("scale", scale), ("bias", bias)):
            if p is not None and (p.shape != features or p.dtype != x.dtype):
                raise ValueError(
                    f"layer_norm: {name} {p.shape} {p.dtype} for x {x.shape} {x.dtype} and axis "
                    f"{self.axis}; it must have x's dtype and shape x.shape[axis:] = {features}"
                )
        rows, n = math.prod(x.shape[:axis]), math.prod(features)
        if n == 0:
            raise ValueError(f"layer_norm: x {x.shape} has no feature from axis {self.axis} on")
        y = self.output(x.shape, x.dtype)
        # float16 is storage only (devices/half.py): its statistics stay float32
        stats = np.float32 if x.dtype == np.float16 else x.dtype
        mean, rstd = self.output((rows,), stats), self.output((rows,), stats)
        eps = self.epsilon

        def kernel(y_, mean_, rstd_, x_, scale_, *bias_):
            y2 = y_.reshape(rows, n)
            K.layernorm_forward(y2, mean_, rstd_, x_.reshape(rows, n), scale_.reshape(n), eps)
            if bias_:
                K.add_bias_rows(y2, bias_[0].reshape(n))

        reads = (x, scale) if bias is None else (x, scale, bias)
        self.run(kernel, reads=reads, writes=(y, mean, rstd))
        self.view, self.features = (rows, n), features
        self.save(x, scale if self.needs_grad[0] else None, mean, rstd)
        return y

    def backward(self, dy):
        K, (rows, n), features = self.kernels, self.view, self.features
        x, scale, mean, rstd = self.saved
        grads = [None] * len(self.needs_grad)  # (dx, dscale) or (dx, dscale, dbias)
        if self.needs_grad[0]:
            grads[0] = self.output(x.shape, dy.dtype)
            self.run(
                lambda dx_, dy_, x_, m_, r_, g_: K.layernorm_backward_data(
                    dx_.reshape(rows, n), dy_.reshape(rows, n), x_.reshape(rows, n), m_, r_,
                    g_.reshape(n)),
                reads=(dy, x, mean, rstd, scale),
                writes=(grads[0],),
            )  # fmt: skip
        if self.needs_grad[1]:
            grads[1] = self.output(features, dy.dtype)
            self.run(
                lambda ds_, dy_, x_, m_, r_: K.layernorm_backward_scale(
                    ds_.reshape(n), dy_.reshape(rows, n), x_.reshape(rows, n), m_, r_),
                reads=(dy, x, mean, rstd),
                writes=(grads[1],),
            )  # fmt: skip
        if len(grads) == 3 and self.needs_grad[2]:
            grads[2] = self.output(features, dy.dtype)
            self.run(
                lambda db_, dy_: K.sum_rows(db_.reshape(n), dy_.reshape(rows, n)),
                reads=(dy,),
                writes=(grads[2],),
            )
        return tuple(grads)


def layer_norm(x, scale, bias=None, axis=-1, epsilon=1e-5):
    """ONNX LayerNormalization: x normalised over its axes from `axis` to the end, times scale,
    plus bias (None: no bias); scale and bias have the shape x.shape[axis:]."""
    if bias is None:
        return LayerNorm(axis, epsilon)(x, scale)
    return LayerNorm(axis, epsilon)(x, scale, bias)
