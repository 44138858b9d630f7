"""Convolution and pooling layers (SINGA's): Conv2d (grouped, dilated, with its algorithm and
workspace chosen per pass, see nnmem.ops.conv), SeparableConv2d, and 2-D and 1-D pooling.

Every one takes SINGA's ``pad_mode``: "NOTSET" pads by ``padding``; "VALID" pads nothing;
"SAME_UPPER" and "SAME_LOWER" pad so that the output has ceil(size / stride) positions per
axis (the input's size at stride 1), the odd element of padding after (UPPER) or before
(LOWER): nnmem.ops.padding.auto_pads, worked out from each input's size. Then ``padding`` is not
read, as in SINGA (and ONNX, whose auto_pad these are)."""

import math

from nnmem import autograd
from nnmem.layers.base import Layer, parameter_like
from nnmem.ops.padding import PAD_MODES, auto_pads, pair


class Conv2d(Layer):
    """2-D convolution. Conv2d(nb_kernels, kernel_size, ...) or Conv2d(in_channels, nb_kernels,
    kernel_size, stride, padding) (SINGA). activation="RELU" appends a ReLU. algorithm is
    "auto" (the fastest, timed at the first run, of gemm, its workspace sized to the free
    memory, the specialised kernel of the geometry (conv3x3, conv3x3s2 for 3x3 filters with
    stride 2, conv1x1), and direct where no specialised kernel is a candidate:
    nnmem/ops/conv.py), "gemm", "direct" or one of the specialised kernels by name. group=g
    splits channels and filters into g groups
    (W is (nb_kernels, C/g, KH, KW); runs the direct kernels). dilation=d (one int or
    (dh, dw)) spreads the filter's taps d apart (runs the direct kernels). pad_mode: see the
    module's docstring."""

    def __init__(
        self,
        nb_kernels,
        kernel_size,
        *args,
        stride=1,
        padding=0,
        dilation=1,
        group=1,
        bias=True,
        pad_mode="NOTSET",
        activation="NOTSET",
        algorithm="auto",
        **kwargs,
    ):
        super().__init__()
        self.in_channels = None
        if args:
            self.in_channels, nb_kernels, kernel_size = nb_kernels, kernel_size, args[0]
        if len(args) > 1:
            stride = args[1]
        if len(args) > 2:
            padding = args[2]
        if not isinstance(group, int) or group < 1:
            raise ValueError(f"Conv2d: group must be a positive int, not {group!r}")
        self.group = group
        if activation not in ("NOTSET", "RELU"):
            raise ValueError(f"Conv2d: activation {activation!r}; use 'RELU' or 'NOTSET'")
        self.nb_kernels, self.kernel_size = nb_kernels, pair(kernel_size)
        self.stride, self.padding = pair(stride), pair(padding)
        self.dilation, self.pad_mode = pair(dilation), _pad_mode("Conv2d", pad_mode)
        self.bias, self.activation, self.algorithm = bias, activation, algorithm

    def initialize(self, x):
        if x.ndim() != 4:
            raise ValueError(
                f"{self.full_name() or 'Conv2d'}: input of shape {x.shape}; Conv2d "
                "takes (N, C, H, W)"
            )
        if self.in_channels is not None and x.shape[1] != self.in_channels:
            raise ValueError(
                f"{self.full_name() or 'Conv2d'}: declared {self.in_channels} input "
                f"channels but the input {x.shape} has {x.shape[1]}"
            )
        self.in_channels = x.shape[1]
        g = self.group
        if self.in_channels % g or self.nb_kernels % g:
            raise ValueError(
                f"{self.full_name() or 'Conv2d'}: group={g} must divide the {self.in_channels} "
                f"input channels and the {self.nb_kernels} filters"
            )
        kh, kw = self.kernel_size
        std = math.sqrt(2.0 / (self.in_channels * kh * kw + self.nb_kernels))
        self.W = parameter_like((self.nb_kernels, self.in_channels // g, kh, kw), x)
        self.W.gaussian(0.0, std)
        if self.bias:
            self.b = parameter_like((self.nb_kernels,), x)
            self.b.set_value(0.0)

    def forward(self, x):
        if x.ndim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"{self.full_name() or 'Conv2d'}: input of shape {x.shape}, expected "
                f"(N, {self.in_channels}, H, W)"
            )
        b = self.b if self.bias else None
        pads = _pads(self, x.shape[2:], self.dilation)
        y = autograd.conv2d(
            x, self.W, b, self.stride, pads, self.algorithm, self.group, self.dilation
        )
        return autograd.relu(y) if self.activation == "RELU" else y


class SeparableConv2d(Layer):
    """Xception's separable convolution: a depthwise KxK convolution (one filter per input
    channel, group = C) then a pointwise 1x1 convolution to nb_kernels channels.
    SeparableConv2d(nb_kernels, kernel_size, stride=1, padding=0, bias=False) or
    SeparableConv2d(in_channels, nb_kernels, kernel_size, stride, padding) (SINGA)."""

    def __init__(self, nb_kernels, kernel_size, *args, stride=1, padding=0, bias=False):
        super().__init__()
        if args:
            nb_kernels, kernel_size = kernel_size, args[0]
        if len(args) > 1:
            stride = args[1]
        if len(args) > 2:
            padding = args[2]
        self.nb_kernels, self.kernel_size = nb_kernels, kernel_size
        self.stride, self.padding, self.bias = stride, padding, bias

    def initialize(self, x):
        c = x.shape[1]
        self.depthwise_conv = Conv2d(
            c, self.kernel_size, stride=self.stride, padding=self.padding, group=c, bias=self.bias
        )
        self.point_conv = Conv2d(self.nb_kernels, 1, bias=self.bias)

    def forward(self, x):
        return self.point_conv(self.depthwise_conv(x))


class Pooling2d(Layer):
    """Max (is_max=True) or average pooling over kernel_size windows; stride defaults to
    kernel_size (SINGA's base class of MaxPool2d and AvgPool2d). pad_mode: see the module's
    docstring."""

    is_max = True

    def __init__(
        self, kernel_size, stride=None, padding=0, is_max=None, pad_mode="NOTSET", **kwargs
    ):
        super().__init__()
        if is_max is not None:
            self.is_max = is_max
        self.kernel_size = pair(kernel_size)
        self.stride = self.kernel_size if stride is None else pair(stride)
        self.padding, self.pad_mode = pair(padding), _pad_mode("Pooling2d", pad_mode)

    def forward(self, x):
        pads = _pads(self, x.shape[2:])
        return autograd.pooling_2d(x, self.kernel_size, self.stride, pads, self.is_max)


class MaxPool2d(Pooling2d):
    """Max over kernel_size windows; stride defaults to kernel_size."""

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET", **kwargs):
        super().__init__(kernel_size, stride, padding, None, pad_mode)


class AvgPool2d(Pooling2d):
    """Mean over kernel_size windows (padded zeros count); stride defaults to kernel_size."""

    is_max = False

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET", **kwargs):
        super().__init__(kernel_size, stride, padding, None, pad_mode)


class MaxPool1d(Layer):
    """Max over windows of `kernel_size` along the last axis of (N, C, L): the 2-D kernels on a
    (N, C, 1, L) view."""

    is_max = True

    def __init__(self, kernel_size, stride=None, padding=0, pad_mode="NOTSET", **kwargs):
        super().__init__()
        self.kernel_size = (1, kernel_size)
        self.stride = self.kernel_size if stride is None else (1, stride)
        self.padding, self.pad_mode = (0, padding), _pad_mode("MaxPool1d", pad_mode)

    def forward(self, x):
        n, c, length = x.shape
        pads = _pads(self, (1, length))
        x = autograd.reshape(x, (n, c, 1, length))
        y = autograd.pooling_2d(x, self.kernel_size, self.stride, pads, self.is_max)
        return autograd.reshape(y, (n, c, y.shape[-1]))


class AvgPool1d(MaxPool1d):
    """Mean over windows of `kernel_size` along the last axis of (N, C, L)."""

    is_max = False


def _pad_mode(name, pad_mode):
    """pad_mode, checked: one of PAD_MODES."""
    if pad_mode not in PAD_MODES:
        raise ValueError(f"{name}: pad_mode {pad_mode!r}; use one of {', '.join(PAD_MODES)}")
    return pad_mode


def _pads(layer, size, dilation=(1, 1)):
    """The padding a layer's pad_mode gives an input of spatial `size`: its `padding` for
    "NOTSET", else (top, left, bottom, right) from nnmem.ops.padding.auto_pads."""
    if layer.pad_mode == "NOTSET":
        return layer.padding
    return auto_pads(layer.pad_mode, size, layer.kernel_size, layer.stride, dilation)
