"""Batch normalisation over the channels of NCHW input.

Training: y = scale * (x - mean_B) / sqrt(var_B + eps) + bias with the batch's statistics, and
the running statistics updated in place (SINGA's convention: running = momentum * running +
(1 - momentum) * batch). Inference: the running statistics instead of the batch's.
"""
from nnmem import autograd
from nnmem.autograd import Operator
from nnmem.kernels import cpu as K


class BatchNorm2d(Operator):
    """Differentiable in (x, scale, bias); running_mean / running_var are updated, not learned."""

    def __init__(self, running_mean, running_var, momentum=0.9, eps=1e-5):
        super().__init__()
        self.running_mean, self.running_var = running_mean, running_var
        self.momentum, self.eps = float(momentum), float(eps)

    def forward(self, x, scale, bias):
        c = x.shape[1] if x.ndim() == 4 else None
        if x.ndim() != 4 or scale.shape != (c,) or bias.shape != (c,):
            raise ValueError(f"batchnorm: input {x.shape} with scale {scale.shape}; need "
                             "(N, C, H, W) and (C,) parameters")
        y = self.output(x.shape, x.dtype)
        rm, rv = self.running_mean, self.running_var
        if not autograd.training:
            self.run(lambda: K.batchnorm2d_forward_infer(y.raw, x.raw, scale.raw, bias.raw,
                                                         rm.raw, rv.raw, self.eps),
                     reads=(x, scale, bias, rm, rv), writes=(y,))
            return y
        mean, invstd = self.output((c,), x.dtype), self.output((c,), x.dtype)
        self.run(lambda: K.batchnorm2d_forward_train(y.raw, mean.raw, invstd.raw, rm.raw, rv.raw,
                                                     x.raw, scale.raw, bias.raw,
                                                     self.momentum, self.eps),
                 reads=(x, scale, bias, rm, rv), writes=(y, mean, invstd, rm, rv))
        self.save(x, scale, mean, invstd)
        return y

    def backward(self, dy):
        x, scale, mean, invstd = self.saved
        dx = self.output(x.shape, dy.dtype)
        dscale, dbias = self.output(scale.shape, dy.dtype), self.output(scale.shape, dy.dtype)
        self.run(lambda: K.batchnorm2d_backward(dx.raw, dscale.raw, dbias.raw, dy.raw, x.raw,
                                                scale.raw, mean.raw, invstd.raw),
                 reads=(dy, x, scale, mean, invstd), writes=(dx, dscale, dbias))
        return dx, dscale, dbias


def batchnorm_2d(x, scale, bias, running_mean, running_var, momentum=0.9, eps=1e-5):
    return BatchNorm2d(running_mean, running_var, momentum, eps)(x, scale, bias)
