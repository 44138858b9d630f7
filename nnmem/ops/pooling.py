"""2-D max and average pooling (NCHW).

Max pooling saves the int32 position of each window's maximum (argmax) instead of its input:
a quarter of the input's elements for 2x2 windows, and backward needs nothing else.
"""

import numpy as np

from nnmem.kernels import sizes
from nnmem.operation import SAME, Operator
from nnmem.ops.conv import pair

__all__ = ["Pooling2d", "pooling_2d"]


class Pooling2d(Operator):
    """y[n,c,i,j] = max (or mean) of x[n,c] over the window at (i*sh - ph, j*sw - pw)."""

    def __init__(self, kernel, stride, padding, is_max=True):
        super().__init__("MaxPool2d" if is_max else "AvgPool2d")
        self.kernel, self.stride, self.padding, self.is_max = kernel, stride, padding, is_max
        (kh, kw), (ph, pw) = kernel, padding
        if 2 * ph > kh or 2 * pw > kw:
            raise ValueError(
                f"pooling: padding {padding} is more than half the kernel {kernel}; "
                "a window would lie entirely in the padding"
            )

    def forward(self, x):
        K = self.kernels
        if x.ndim() != 4:
            raise ValueError(f"pooling: input of shape {x.shape}; need (N, C, H, W)")
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        if x.shape[2] + 2 * ph < kh or x.shape[3] + 2 * pw < kw:
            raise ValueError(
                f"pooling: a {kh}x{kw} window does not fit the {x.shape[2:]} input "
                f"(padding {self.padding}); use a smaller window"
            )
        out_shape = sizes.pool2d_output_shape(*x.shape, kh, kw, sh, sw, ph, pw)
        y = self.output(out_shape, x.dtype)
        self.in_shape = x.shape
        if self.is_max:
            argmax = self.output(out_shape, np.int32)
            self.run(
                lambda y_, am_, x_: K.maxpool2d_forward(y_, am_, x_, kh, kw, sh, sw, ph, pw),
                reads=(x,),
                writes=(y, argmax),
                rebuild=SAME,
            )
            self.save(argmax)
        else:
            self.run(
                lambda y_, x_: K.avgpool2d_forward(y_, x_, kh, kw, sh, sw, ph, pw),
                reads=(x,),
                writes=(y,),
                rebuild=SAME,
            )
        return y

    def backward(self, dy):
        K = self.kernels
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.padding
        dx = self.output(self.in_shape, dy.dtype)
        if self.is_max:
            (argmax,) = self.saved
            self.run(
                lambda dx_, dy_, am_: K.maxpool2d_backward(dx_, dy_, am_, kh, kw, sh, sw, ph, pw),
                reads=(dy, argmax),
                writes=(dx,),
            )
        else:
            self.run(
                lambda dx_, dy_: K.avgpool2d_backward(dx_, dy_, kh, kw, sh, sw, ph, pw),
                reads=(dy,),
                writes=(dx,),
            )
        return dx


def pooling_2d(x, kernel, stride=None, padding=0, is_max=True):
    """Functional form; stride defaults to the kernel size."""
    kernel = pair(kernel)
    stride = kernel if stride is None else pair(stride)
    return Pooling2d(kernel, stride, pair(padding), is_max)(x)
