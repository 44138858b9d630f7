"""Activations: ReLU and Sigmoid. Both save their output, not their input: the gradient can be
written from y alone (relu: dy * [y > 0]; sigmoid: dy * y * (1 - y)). So the forward may
overwrite its input in place (when no later operation reads it), and the backward may
overwrite dy."""

from nnmem.operation import SAME, Operator

__all__ = ["ReLU", "Sigmoid", "relu", "sigmoid"]


class _Activation(Operator):
    kernel_forward = kernel_backward = None  # names of kernels, taken from the device

    def forward(self, x):
        y = self.output(x.shape, x.dtype)
        fwd = getattr(self.kernels, self.kernel_forward)
        self.run(
            lambda y_, x_: fwd(y_.reshape(-1), x_.reshape(-1)),
            reads=(x,),
            writes=(y,),
            inplace=((y, x),),
            rebuild=SAME,
            tag=(self.kernel_forward,),
        )
        self.save(y)
        return y

    def backward(self, dy):
        (y,) = self.saved
        dx = self.output(dy.shape, dy.dtype)
        bwd = getattr(self.kernels, self.kernel_backward)
        self.run(
            lambda dx_, dy_, y_: bwd(dx_.reshape(-1), dy_.reshape(-1), y_.reshape(-1)),
            reads=(dy, y),
            writes=(dx,),
            inplace=((dx, dy),),
            tag=(self.kernel_backward,),
        )
        return dx


class ReLU(_Activation):
    """y = max(x, 0)."""

    kernel_forward, kernel_backward = "relu_forward", "relu_backward"


class Sigmoid(_Activation):
    """y = 1 / (1 + exp(-x))."""

    kernel_forward, kernel_backward = "sigmoid_forward", "sigmoid_backward"


def relu(x):
    return ReLU()(x)


def sigmoid(x):
    return Sigmoid()(x)
