"""Batch normalisation over the channels of NCHW input.

Training: y = scale * (x - mean_B) / sqrt(var_B + eps) + bias with the batch's statistics, and
the running statistics updated in place (SINGA's convention: running = momentum * running +
(1 - momentum) * batch). Inference: the running statistics instead of the batch's.
"""

import numpy as np

from nnmem.operation import Operator, is_training

__all__ = ["BatchNorm2d", "batchnorm_2d"]


class BatchNorm2d(Operator):
    """Differentiable in (x, scale, bias); running_mean / running_var are updated, not learned."""

    def __init__(self, running_mean, running_var, momentum=0.9, eps=1e-5):
        super().__init__()
        self.running_mean, self.running_var = running_mean, running_var
        self.momentum, self.eps = float(momentum), float(eps)

    def forward(self, x, scale, bias):
        K = self.kernels
        c = x.shape[1] if x.ndim() == 4 else None
        if x.ndim() != 4 or scale.shape != (c,) or bias.shape != (c,):
            raise ValueError(
                f"batchnorm: input {x.shape} with scale {scale.shape}; need "
                "(N, C, H, W) and (C,) parameters"
            )
        y = self.output(x.shape, x.dtype)
        rm, rv = self.running_mean, self.running_var
        if not is_training():
            eps = self.eps
            self.run(
                lambda y_, x_, g_, b_, rm_, rv_: K.batchnorm2d_forward_infer(
                    y_, x_, g_, b_, rm_, rv_, eps
                ),
                reads=(x, scale, bias, rm, rv),
                writes=(y,),
            )
            return y
        if x.shape[0] * x.shape[2] * x.shape[3] == 0:  # no sample: the statistics would be NaN
            raise ValueError(
                f"batchnorm: an input of {x.shape} has no value per channel to train on (an "
                "empty batch), and would set the running statistics to NaN"
            )
        # float64 statistics: a recomputation rebuilds y from them bit for bit (the kernel
        # computes them in float64; storing them as float32 would round them).
        mean, invstd = self.output((c,), np.float64), self.output((c,), np.float64)
        momentum, eps = self.momentum, self.eps

        def kernel(y_, mean_, invstd_, rm_, rv_, x_, g_, b_, _rm, _rv):
            K.batchnorm2d_forward_train(y_, mean_, invstd_, rm_, rv_, x_, g_, b_, momentum, eps)

        # The running statistics are read and updated in place (they are written, so that
        # a graph orders this step before anything that reads them later).
        self.run(
            kernel,
            reads=(x, scale, bias, rm, rv),
            writes=(y, mean, invstd, rm, rv),
            rebuild=(K.batchnorm2d_forward_apply, (x, scale, bias, mean, invstd), (y,)),
            tag=("batchnorm2d_forward_train", momentum, eps),
        )
        self.save(x, scale, mean, invstd)
        return y

    def backward(self, dy):
        K = self.kernels
        x, scale, mean, invstd = self.saved
        dx = self.output(x.shape, dy.dtype)
        dscale, dbias = self.output(scale.shape, dy.dtype), self.output(scale.shape, dy.dtype)
        self.run(
            K.batchnorm2d_backward,
            reads=(dy, x, scale, mean, invstd),
            writes=(dx, dscale, dbias),
            tag=("batchnorm2d_backward",),
        )
        return dx, dscale, dbias


def batchnorm_2d(x, scale, bias, running_mean, running_var, momentum=0.9, eps=1e-5):
    return BatchNorm2d(running_mean, running_var, momentum, eps)(x, scale, bias)
