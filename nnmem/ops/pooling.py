"""2-D max and average pooling (NCHW).

Max pooling saves the int32 position of each window's maximum (argmax) instead of its input:
a quarter of the input's elements for 2x2 windows, and backward needs nothing else.

ONNX's MaxPool and AveragePool are these with ``padding=(top, left, bottom, right)`` (its pads
[x1_begin, x2_begin, x1_end, x2_end]), ``ceil_mode`` and, for averages, ``count_include_pad``.
nnmem's average pooling counts the padding by default (SINGA's and cuDNN's
CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING: a window sum over kh*kw); ONNX's default,
count_include_pad=0, divides by the window's elements inside the input.
"""

import numpy as np

from nnmem.kernels import sizes
from nnmem.operation import SAME, Operator
from nnmem.ops.padding import four_sides, pair

__all__ = ["Pooling2d", "pooling_2d"]


class Pooling2d(Operator):
    """y[n,c,i,j] = max (or mean) of x[n,c] over the window at (i*sh - top, j*sw - left).

    `padding` is (ph, pw), the same on both sides, or (top, left, bottom, right); each side
    smaller than the window, so that every window holds an input element (max pooling never
    picks padding). `ceil_mode`: the output size rounds up (ONNX, PyTorch), and a last window
    that runs past the padding is clipped. `count_include_pad` (average pooling): divide by the
    window's elements in the padded input (True, the default) or in the input alone."""

    def __init__(
        self, kernel, stride, padding, is_max=True, ceil_mode=False, count_include_pad=True
    ):
        super().__init__("MaxPool2d" if is_max else "AvgPool2d")
        self.kernel, self.stride, self.is_max = tuple(kernel), tuple(stride), is_max
        self.pads = four_sides(pair(padding), "pooling")
        top, left, bottom, right = self.pads
        self.padding = (top, left) if (top, left) == (bottom, right) else self.pads
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)
        kh, kw = self.kernel
        if max(top, bottom) >= kh or max(left, right) >= kw:
            raise ValueError(
                f"pooling: padding {padding} must be smaller than the kernel {kernel} on every "
                "side; a window would lie entirely in the padding"
            )

    def _window(self):
        """The kernels' window arguments after the arrays (kernels/cpu/pool.py)."""
        (kh, kw), (sh, sw), (top, left, bottom, right) = self.kernel, self.stride, self.pads
        return (kh, kw, sh, sw, top, left, bottom, right, self.ceil_mode)

    def forward(self, x):
        K = self.kernels
        if x.ndim() != 4:
            raise ValueError(f"pooling: input of shape {x.shape}; need (N, C, H, W)")
        (kh, kw), (top, left, bottom, right) = self.kernel, self.pads
        if x.shape[2] + top + bottom < kh or x.shape[3] + left + right < kw:
            raise ValueError(
                f"pooling: a {kh}x{kw} window does not fit the {x.shape[2:]} input "
                f"(padding {self.padding}); use a smaller window"
            )
        window = self._window()
        out_shape = sizes.pool2d_output_shape(*x.shape, *window)
        y = self.output(out_shape, x.dtype)
        self.in_shape = x.shape
        if self.is_max:
            argmax = self.output(out_shape, np.int32)
            self.run(
                lambda y_, am_, x_: K.maxpool2d_forward(y_, am_, x_, *window),
                reads=(x,),
                writes=(y, argmax),
                rebuild=SAME,
            )
            self.save(argmax)
        else:
            include = self.count_include_pad
            self.run(
                lambda y_, x_: K.avgpool2d_forward(y_, x_, *window, include),
                reads=(x,),
                writes=(y,),
                rebuild=SAME,
            )
        return y

    def backward(self, dy):
        K = self.kernels
        window = self._window()
        dx = self.output(self.in_shape, dy.dtype)
        if self.is_max:
            (argmax,) = self.saved
            self.run(
                lambda dx_, dy_, am_: K.maxpool2d_backward(dx_, dy_, am_, *window),
                reads=(dy, argmax),
                writes=(dx,),
            )
        else:
            include = self.count_include_pad
            self.run(
                lambda dx_, dy_: K.avgpool2d_backward(dx_, dy_, *window, include),
                reads=(dy,),
                writes=(dx,),
            )
        return dx


def pooling_2d(
    x, kernel, stride=None, padding=0, is_max=True, ceil_mode=False, count_include_pad=True
):
    """Functional form; stride defaults to the kernel size; padding one int, (ph, pw) or
    (top, left, bottom, right)."""
    kernel = pair(kernel)
    stride = kernel if stride is None else pair(stride)
    return Pooling2d(kernel, stride, pair(padding), is_max, ceil_mode, count_include_pad)(x)
