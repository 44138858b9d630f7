"""Layers: SINGA's stateful building blocks, lazily initialised from their first input.

A layer creates its parameters the first time it is called, from the input's shape, dtype and
device (so ``Linear(500)`` needs no input size). Sub-layers and tensors assigned as attributes
are registered in assignment order, and named with dots: ``conv1.W``, ``bn1.running_mean``.
"""

import functools
import math

import numpy as np

from nnmem import autograd
from nnmem.ops.conv import pair
from nnmem.tensor import Tensor, to_numpy


class Layer:
    sep = "."

    def __init_subclass__(cls, **kwargs):
        """A subclass's forward initialises the layer on its first call, as SINGA's LayerMeta
        does: models call self.forward(x) directly from train_one_batch."""
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__:
            cls.forward = _initialising(cls.__dict__["forward"])

    def __init__(self):
        self.__dict__.update(
            name=None, _parent=None, _layers={}, _params={}, _states={}, _initialized=False
        )

    # -- registration ----------------------------------------------------------------------
    def __setattr__(self, name, value):
        if isinstance(value, Layer):
            self._layers[name] = value
            value.__dict__.update(_parent=self, name=name)
        elif isinstance(value, Tensor) and not name.startswith("_"):
            # Learned tensors (stores_grad) are parameters; others (running stats) are states.
            kind = "parameter" if value.stores_grad else "state"
            (self._params if value.stores_grad else self._states)[name] = value
            prefix = self.full_name()
            value.name = f"{prefix + self.sep if prefix else ''}{name}"
            value.block.desc = f"{kind} {value.name} {value.shape} {value.dtype}"
        object.__setattr__(self, name, value)

    def register_layers(self, *layers):
        """Register sub-layers kept in a list (SINGA): named ClassName_index, in order.
        A single dict argument registers them under its keys."""
        if len(layers) == 1 and isinstance(layers[0], dict):
            items = layers[0].items()
        else:
            items = ((f"{type(v).__name__}_{i}", v) for i, v in enumerate(layers))
        for name, value in items:
            if not isinstance(value, Layer):
                raise TypeError(f"register_layers: {name} is a {type(value).__name__}, not a Layer")
            self._layers[name] = value
            value.__dict__.update(_parent=self, name=name)

    def full_name(self):
        """The dotted path from the outermost named layer, e.g. "block1.conv2"."""
        parts, layer = [], self
        while layer is not None and layer.name is not None:
            parts.append(layer.name)
            layer = layer._parent
        return self.sep.join(reversed(parts))

    # -- calling ----------------------------------------------------------------------------
    def initialize(self, *inputs):
        """Create parameters from the first inputs (override in layers that have any)."""

    def forward(self, *inputs):
        raise NotImplementedError

    def __call__(self, *inputs, **kwargs):
        self._initialize_once(inputs)
        name = self.full_name()
        if not name:
            return self.forward(*inputs, **kwargs)
        with autograd.name_scope(name):
            return self.forward(*inputs, **kwargs)

    def device_check(self, *inputs):
        """Move every tensor to the first one's device (SINGA: a layer's inputs and parameters
        must share a device)."""
        for t in inputs[1:]:
            if t.device is not inputs[0].device:
                t.to_device(inputs[0].device)

    def dtype_check(self, *inputs):
        """Convert every tensor to the first one's dtype, in place (SINGA)."""
        for t in inputs[1:]:
            if t.dtype != inputs[0].dtype:
                t.to_type(inputs[0].dtype)

    def _initialize_once(self, inputs):
        if not self._initialized:
            self.initialize(*inputs)
            self.__dict__["_initialized"] = True

    # -- parameters and states ------------------------------------------------------------------
    def _named(self, kind, prefix=""):
        out = {}
        for attr, t in getattr(self, kind).items():
            t.name = prefix + attr
            out[t.name] = t
        for name, sub in self._layers.items():
            out.update(sub._named(kind, prefix + name + self.sep))
        return out

    def get_params(self):
        """{dotted name: Tensor} of every learned parameter, this layer's then sub-layers'."""
        return self._named("_params")

    def get_states(self):
        """Parameters plus the other persistent tensors (e.g. BatchNorm running statistics)."""
        states = self._named("_params")
        states.update(self._named("_states"))
        return states

    def set_params(self, parameters):
        """Copy values (Tensors or NumPy arrays) into the parameters of the same names."""
        self._set(self.get_params(), parameters)

    def set_states(self, states):
        self._set(self.get_states(), states)

    @staticmethod
    def _set(mine, values):
        unknown = sorted(set(values) - set(mine))
        if unknown:
            raise KeyError(f"no parameter or state named {unknown}; this layer has {sorted(mine)}")
        arrays = {k: v if isinstance(v, np.ndarray) else _to_numpy(v) for k, v in values.items()}
        for k, a in arrays.items():  # check all before writing any: a failure changes nothing
            if a.shape != mine[k].shape:
                raise ValueError(f"{k}: value of shape {a.shape}, parameter has {mine[k].shape}")
        for k, a in arrays.items():
            mine[k].copy_from_numpy(a.astype(mine[k].dtype, copy=False))


def _initialising(forward):
    @functools.wraps(forward)
    def run(self, *inputs, **kwargs):
        self._initialize_once(inputs)
        return forward(self, *inputs, **kwargs)

    return run


def _to_numpy(t):
    return to_numpy(t)


def _param(shape, x, requires_grad=True):
    """A parameter (stores_grad) or a state tensor on x's device with x's float dtype.

    Layers assign it to an attribute first and fill it afterwards: the assignment names it
    (conv1.W), so if filling it (its first write, the allocation) runs out of memory, the
    report names the parameter instead of an anonymous tensor."""
    return Tensor(shape, x.device, x.dtype, requires_grad=requires_grad, stores_grad=requires_grad)


class Linear(Layer):
    """y = x W + b. Linear(out_features) or Linear(in_features, out_features) (SINGA)."""

    def __init__(self, out_features, *args, bias=True, **kwargs):
        super().__init__()
        self.in_features = None
        if args:
            self.in_features, out_features = out_features, args[0]
        self.out_features, self.bias = out_features, bias

    def initialize(self, x):
        if x.ndim() != 2:
            raise ValueError(
                f"{self.full_name() or 'Linear'}: input of shape {x.shape}; Linear "
                "takes (batch, features): put a Flatten before it"
            )
        if self.in_features is not None and x.shape[1] != self.in_features:
            raise ValueError(
                f"{self.full_name() or 'Linear'}: declared in_features="
                f"{self.in_features} but the input has {x.shape[1]} features"
            )
        self.in_features = x.shape[1]
        std = math.sqrt(2.0 / (self.in_features + self.out_features))
        self.W = _param((self.in_features, self.out_features), x)
        self.W.gaussian(0.0, std)
        if self.bias:
            self.b = _param((self.out_features,), x)
            self.b.set_value(0.0)

    def forward(self, x):
        if x.ndim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(
                f"{self.full_name() or 'Linear'}: input of shape {x.shape}, expected "
                f"(batch, {self.in_features})"
            )
        y = autograd.matmul(x, self.W)
        return autograd.add_bias(y, self.b) if self.bias else y


class Conv2d(Layer):
    """2-D convolution. Conv2d(nb_kernels, kernel_size, ...) or Conv2d(in_channels, nb_kernels,
    kernel_size, stride, padding) (SINGA). activation="RELU" appends a ReLU. algorithm is
    "auto" (the fastest of gemm, its workspace sized to the free memory, conv3x3 for 3x3
    filters with stride 1 and padding 1, and direct: timed at the first run), "gemm", "direct"
    or "conv3x3". group=g splits channels and filters into g groups
    (W is (nb_kernels, C/g, KH, KW); runs the direct kernels)."""

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
        if dilation != 1 or pad_mode != "NOTSET":
            raise NotImplementedError(
                "Conv2d: dilation and pad_mode are not supported yet;"
                " use dilation=1 and explicit padding"
            )
        if not isinstance(group, int) or group < 1:
            raise ValueError(f"Conv2d: group must be a positive int, not {group!r}")
        self.group = group
        if activation not in ("NOTSET", "RELU"):
            raise ValueError(f"Conv2d: activation {activation!r}; use 'RELU' or 'NOTSET'")
        self.nb_kernels, self.kernel_size = nb_kernels, pair(kernel_size)
        self.stride, self.padding = pair(stride), pair(padding)
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
        self.W = _param((self.nb_kernels, self.in_channels // g, kh, kw), x)
        self.W.gaussian(0.0, std)
        if self.bias:
            self.b = _param((self.nb_kernels,), x)
            self.b.set_value(0.0)

    def forward(self, x):
        if x.ndim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"{self.full_name() or 'Conv2d'}: input of shape {x.shape}, expected "
                f"(N, {self.in_channels}, H, W)"
            )
        b = self.b if self.bias else None
        y = autograd.conv2d(x, self.W, b, self.stride, self.padding, self.algorithm, self.group)
        return autograd.relu(y) if self.activation == "RELU" else y


class Pooling2d(Layer):
    """Max (is_max=True) or average pooling over kernel_size windows; stride defaults to
    kernel_size (SINGA's base class of MaxPool2d and AvgPool2d)."""

    is_max = True

    def __init__(self, kernel_size, stride=None, padding=0, is_max=None, **kwargs):
        super().__init__()
        if is_max is not None:
            self.is_max = is_max
        self.kernel_size = pair(kernel_size)
        self.stride = self.kernel_size if stride is None else pair(stride)
        self.padding = pair(padding)

    def forward(self, x):
        return autograd.pooling_2d(x, self.kernel_size, self.stride, self.padding, self.is_max)


class MaxPool2d(Pooling2d):
    """Max over kernel_size windows; stride defaults to kernel_size."""


class AvgPool2d(Pooling2d):
    """Mean over kernel_size windows (padded zeros count); stride defaults to kernel_size."""

    is_max = False


class MaxPool1d(Layer):
    """Max over windows of `kernel_size` along the last axis of (N, C, L): the 2-D kernels on a
    (N, C, 1, L) view."""

    is_max = True

    def __init__(self, kernel_size, stride=None, padding=0, **kwargs):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding

    def forward(self, x):
        n, c, length = x.shape
        y = autograd.pooling_2d(
            autograd.reshape(x, (n, c, 1, length)),
            (1, self.kernel_size),
            (1, self.stride),
            (0, self.padding),
            self.is_max,
        )
        return autograd.reshape(y, (n, c, y.shape[-1]))


class AvgPool1d(MaxPool1d):
    """Mean over windows of `kernel_size` along the last axis of (N, C, L)."""

    is_max = False


class BatchNorm2d(Layer):
    """Batch normalisation per channel; parameters scale, bias; states running_mean/var.
    BatchNorm2d(momentum=0.9) or BatchNorm2d(num_features, momentum=0.9) (SINGA)."""

    def __init__(self, *args, momentum=0.9, eps=1e-5):
        super().__init__()
        self.num_features = args[0] if args else None
        self.momentum, self.eps = momentum, eps

    def initialize(self, x):
        if x.ndim() != 4:
            raise ValueError(
                f"{self.full_name() or 'BatchNorm2d'}: input of shape {x.shape}; "
                "BatchNorm2d takes (N, C, H, W)"
            )
        c = x.shape[1]
        if self.num_features is not None and c != self.num_features:
            raise ValueError(
                f"{self.full_name() or 'BatchNorm2d'}: declared {self.num_features} "
                f"features but the input {x.shape} has {c} channels"
            )
        self.num_features = c
        self.scale = _param((c,), x)
        self.scale.set_value(1.0)
        self.bias = _param((c,), x)
        self.bias.set_value(0.0)
        self.running_mean = _param((c,), x, requires_grad=False)
        self.running_mean.set_value(0.0)
        self.running_var = _param((c,), x, requires_grad=False)
        self.running_var.set_value(1.0)

    def forward(self, x):
        return autograd.batchnorm_2d(
            x, self.scale, self.bias, self.running_mean, self.running_var, self.momentum, self.eps
        )


class ReLU(Layer):
    def forward(self, x):
        return autograd.relu(x)


class Sigmoid(Layer):
    def forward(self, x):
        return autograd.sigmoid(x)


class Flatten(Layer):
    """(N, d1, d2, ...) -> (N, d1*d2*...) for axis=1 (a view, no copy)."""

    def __init__(self, axis=1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return autograd.flatten(x, self.axis)


class Dropout(Layer):
    """Zero each element with probability `ratio` in training, scaling the rest by 1/(1-ratio)."""

    def __init__(self, ratio=0.5):
        super().__init__()
        self.ratio = ratio

    def forward(self, x):
        return autograd.dropout(x, self.ratio)


class Add(Layer):
    """y = a + b (residual joins)."""

    def forward(self, a, b):
        return autograd.add(a, b)


class Cat(Layer):
    """Concatenate tensors along `axis` (fan joins; SINGA's default axis is 0)."""

    def __init__(self, axis=0):
        super().__init__()
        self.axis = axis

    def forward(self, xs):
        return autograd.cat(xs, self.axis)


class SoftMaxCrossEntropy(Layer):
    """Mean cross-entropy of softmax(x) against class ids (B,) or one-hot rows (B, C)."""

    def forward(self, x, t):
        return autograd.softmax_cross_entropy(x, t)


class MeanSquareError(Layer):
    """0.5 * sum((x - t)^2) / batch."""

    def forward(self, x, t):
        return autograd.mse_loss(x, t)


class LRN(Layer):
    """Local response normalisation across channels (AlexNet, Caffe's LRN):
    y = x / (k + alpha/size * sum of x^2 over the `size` channels centred on each)^beta.
    Defaults are AlexNet's and torch.nn.LocalResponseNorm's."""

    def __init__(self, size=5, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, x):
        return autograd.lrn(x, self.size, self.alpha, self.beta, self.k)


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


class Gemm(Layer):
    """Y = alpha * A' B' + beta * C (ONNX's Gemm) with B = W the weights and C = b the bias:
    A' = A^T if transA, B' = W^T if transB (SINGA's default: W is (nb_kernels, in_features))."""

    def __init__(
        self, nb_kernels, alpha=1.0, beta=1.0, transA=False, transB=True, bias=True,
        bias_shape=None,
    ):  # fmt: skip
        super().__init__()
        self.nb_kernels, self.alpha, self.beta = nb_kernels, alpha, beta
        self.transA, self.transB = int(bool(transA)), int(bool(transB))
        self.bias, self.bias_shape = bias, bias_shape

    def initialize(self, x):
        self.in_features = x.shape[0] if self.transA else x.shape[-1]
        shape = (self.in_features, self.nb_kernels)
        self.W = _param(shape[::-1] if self.transB else shape, x)
        self.W.gaussian(0.0, math.sqrt(2.0 / (self.in_features + self.nb_kernels)))
        if self.bias:
            self.b = _param(tuple(self.bias_shape or (1, self.nb_kernels)), x)
            self.b.set_value(0.0)

    def forward(self, x):
        b = self.b if self.bias else None
        return autograd.gemm(x, self.W, b, self.alpha, self.beta, self.transA, self.transB)


class Embedding(Layer):
    """A table of input_dim rows of output_dim features, looked up by int32 ids:
    (..., ) ids -> (..., output_dim). initializer: "gaussian" (N(0, 1)) or "uniform" (U[-1, 1))."""

    def __init__(self, input_dim, output_dim, initializer="gaussian"):
        super().__init__()
        if initializer not in ("gaussian", "uniform"):
            raise ValueError(f"Embedding: initializer {initializer!r}; 'gaussian' or 'uniform'")
        self.input_dim, self.output_dim, self.initializer = input_dim, output_dim, initializer

    def initialize(self, x):
        self.W = Tensor(
            (self.input_dim, self.output_dim), x.device, requires_grad=True, stores_grad=True
        )
        if self.initializer == "uniform":
            self.W.uniform(-1.0, 1.0)
        else:
            self.W.gaussian(0.0, 1.0)

    def from_pretrained(self, W, freeze=True):
        """Take the table from W (a Tensor or array); freeze: no gradient flows into it."""
        self._set({"W": self.W}, {"W": W})
        self.W.requires_grad = not freeze

    def forward(self, x):
        return autograd.embedding(x, self.W)


class SoftMax(Layer):
    """softmax over axis 1 (SINGA's layer)."""

    def forward(self, x):
        return autograd.softmax(x)


class CrossEntropy(Layer):
    """-sum(t * log(x)) / batch for probabilities x (after a SoftMax)."""

    def forward(self, x, t):
        return autograd.cross_entropy(x, t)


class BinaryCrossEntropy(Layer):
    """-sum(t log(x) + (1 - t) log(1 - x)) / batch for probabilities x (after a Sigmoid)."""

    def forward(self, x, t):
        return autograd.binary_cross_entropy(x, t)


class Reshape(Layer):
    """x viewed with another shape (no copy): layer(x, shape)."""

    def forward(self, x, shape):
        return autograd.reshape(x, tuple(shape))


class RNN(Layer):
    """Elman RNN over a list of time steps: h_t = tanh(x_t Wx + h_{t-1} Wh + b) (or relu).
    layer(xs, h0) -> ([h_1, ..., h_T], h_T), xs a list of (batch, input_size) tensors.
    Unrolled: every step is its own operators, so the graph, liveness and recomputation see
    each step's tensors (the tanh outputs are cheap to rebuild in backward)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0, bidirectional=False):  # fmt: skip
        super().__init__()
        _single_layer("RNN", num_layers, batch_first, dropout, bidirectional)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity {nonlinearity!r}; 'tanh' or 'relu'")
        self.input_size, self.hidden_size = input_size, hidden_size
        self.nonlinearity, self.bias = nonlinearity, bias

    def initialize(self, xs, h0):
        self.Wx = _param((self.input_size, self.hidden_size), xs[0])
        self.Wx.gaussian(0.0, 1.0)
        self.Wh = _param((self.hidden_size, self.hidden_size), xs[0])
        self.Wh.gaussian(0.0, 1.0)
        self.b = _param((self.hidden_size,), xs[0])
        self.b.set_value(0.0)

    def forward(self, xs, h0):
        out, h = [], h0
        for x in xs:
            y = autograd.add(autograd.matmul(h, self.Wh), autograd.matmul(x, self.Wx))
            y = autograd.add_bias(y, self.b)
            h = autograd.tanh(y) if self.nonlinearity == "tanh" else autograd.relu(y)
            out.append(h)
        return out, h


class LSTM(Layer):
    """LSTM over a list of time steps (SINGA's equations and parameter names):
        i = sigmoid(x Wx_i + Bx_i + h Wh_i + Bh_i), and f, o likewise; g = tanh(...)
        c' = f * c + i * g,  h' = o * tanh(c')
    layer(xs, (h0, c0)) -> ([h_1, ..., h_T], h_T, c_T). Unrolled over time: the four gates of
    every step are tensors of their own, which recomputation can drop after forward and rebuild
    in backward (sigmoid and tanh are cheap), the LSTM's memory lesson."""

    GATES = ("i", "f", "o", "g")

    def __init__(self, input_size, hidden_size, nonlinearity="tanh", num_layers=1, bias=True,
                 batch_first=False, dropout=0, bidirectional=False):  # fmt: skip
        super().__init__()
        _single_layer("LSTM", num_layers, batch_first, dropout, bidirectional)
        self.input_size, self.hidden_size = input_size, hidden_size

    def initialize(self, xs, h0_c0):
        x, n, h = xs[0], self.input_size, self.hidden_size
        for kind, shape in (("Wx", (n, h)), ("Wh", (h, h))):
            for gate in self.GATES:
                setattr(self, f"{kind}_{gate}", _param(shape, x))
                getattr(self, f"{kind}_{gate}").gaussian(0.0, 0.01)
        for kind in ("Bx", "Bh"):
            for gate in self.GATES:
                setattr(self, f"{kind}_{gate}", _param((h,), x))
                getattr(self, f"{kind}_{gate}").set_value(0.0)

    def _gate(self, gate, x, h):
        y1 = autograd.add_bias(
            autograd.matmul(x, getattr(self, f"Wx_{gate}")), getattr(self, f"Bx_{gate}")
        )
        y2 = autograd.add_bias(autograd.matmul(h, getattr(self, f"Wh_{gate}")),
                               getattr(self, f"Bh_{gate}"))  # fmt: skip
        y = autograd.add(y1, y2)
        return autograd.tanh(y) if gate == "g" else autograd.sigmoid(y)

    def forward(self, xs, h0_c0):
        h, c = h0_c0
        out = []
        for x in xs:
            i, f, o, g = (self._gate(gate, x, h) for gate in self.GATES)
            c = autograd.add(autograd.mul(f, c), autograd.mul(i, g))
            h = autograd.mul(o, autograd.tanh(c))
            out.append(h)
        return out, h, c


def _single_layer(name, num_layers, batch_first, dropout, bidirectional):
    """SINGA's Python RNN and LSTM accept these arguments and ignore them; refuse instead of
    silently building a different network."""
    if num_layers != 1 or batch_first or dropout or bidirectional:
        raise NotImplementedError(
            f"{name}: one layer, time-major, no dropout, one direction (as SINGA's Python "
            "layer computes); stack layers yourself for more"
        )
