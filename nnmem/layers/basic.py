"""SINGA's other layers: dense (Linear, Gemm, Embedding), normalisation (BatchNorm2d, LRN),
activations, dropout, shape layers (Flatten, Reshape, Cat, Add) and the losses."""

import math

from nnmem import autograd
from nnmem.layers.base import Layer, parameter_like
from nnmem.tensor import Tensor


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
        self.W = parameter_like((self.in_features, self.out_features), x)
        self.W.gaussian(0.0, std)
        if self.bias:
            self.b = parameter_like((self.out_features,), x)
            self.b.set_value(0.0)

    def forward(self, x):
        if x.ndim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(
                f"{self.full_name() or 'Linear'}: input of shape {x.shape}, expected "
                f"(batch, {self.in_features})"
            )
        y = autograd.matmul(x, self.W)
        return autograd.add_bias(y, self.b) if self.bias else y


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
        self.W = parameter_like(shape[::-1] if self.transB else shape, x)
        self.W.gaussian(0.0, math.sqrt(2.0 / (self.in_features + self.nb_kernels)))
        if self.bias:
            self.b = parameter_like(tuple(self.bias_shape or (1, self.nb_kernels)), x)
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
        self.scale = parameter_like((c,), x)
        self.scale.set_value(1.0)
        self.bias = parameter_like((c,), x)
        self.bias.set_value(0.0)
        self.running_mean = parameter_like((c,), x, requires_grad=False)
        self.running_mean.set_value(0.0)
        self.running_var = parameter_like((c,), x, requires_grad=False)
        self.running_var.set_value(1.0)

    def forward(self, x):
        return autograd.batchnorm_2d(
            x, self.scale, self.bias, self.running_mean, self.running_var, self.momentum, self.eps
        )


class LRN(Layer):
    """Local response normalisation across channels (AlexNet, Caffe's LRN):
    y = x / (k + alpha/size * sum of x^2 over the `size` channels centred on each)^beta.
    Defaults are AlexNet's and torch.nn.LocalResponseNorm's."""

    def __init__(self, size=5, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, x):
        return autograd.lrn(x, self.size, self.alpha, self.beta, self.k)


class Dropout(Layer):
    """Zero each element with probability `ratio` in training, scaling the rest by 1/(1-ratio)."""

    def __init__(self, ratio=0.5):
        super().__init__()
        self.ratio = ratio

    def forward(self, x):
        return autograd.dropout(x, self.ratio)


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


class Reshape(Layer):
    """x viewed with another shape (no copy): layer(x, shape)."""

    def forward(self, x, shape):
        return autograd.reshape(x, tuple(shape))


class SoftMax(Layer):
    """softmax over axis 1 (SINGA's layer)."""

    def forward(self, x):
        return autograd.softmax(x)


class SoftMaxCrossEntropy(Layer):
    """Mean cross-entropy of softmax(x) against class ids (B,) or one-hot rows (B, C)."""

    def forward(self, x, t):
        return autograd.softmax_cross_entropy(x, t)


class MeanSquareError(Layer):
    """0.5 * sum((x - t)^2) / batch."""

    def forward(self, x, t):
        return autograd.mse_loss(x, t)


class CrossEntropy(Layer):
    """-sum(t * log(x)) / batch for probabilities x (after a SoftMax)."""

    def forward(self, x, t):
        return autograd.cross_entropy(x, t)


class BinaryCrossEntropy(Layer):
    """-sum(t log(x) + (1 - t) log(1 - x)) / batch for probabilities x (after a Sigmoid)."""

    def forward(self, x, t):
        return autograd.binary_cross_entropy(x, t)
