"""Optimizers with SINGA's update rules. ``optimizer(loss)`` runs backward and applies each
parameter's update as soon as its gradient is final, then drops that gradient: gradients do not
pile up until the end of backward.

State (momentum buffers, Adam moments) is keyed by the parameter tensor itself, not by its
name, so two layers that happen to share a name cannot share a buffer.
"""
from nnmem import autograd
from nnmem.kernels import cpu as K
from nnmem.tensor import zeros_like


def _flat(t):
    return t.raw.reshape(-1)


class Optimizer:
    def __init__(self, lr):
        self.lr = float(lr)
        self.step_counter = 0

    def __call__(self, loss):
        """Backward from `loss`, update every parameter, advance the step counter."""
        for param, grad in autograd.backward(loss):
            self.apply(param.name, param, grad)
        self.step()

    backward_and_update = __call__

    def apply(self, param_name, param_value, param_grad):
        raise NotImplementedError

    def step(self):
        self.step_counter += 1


class SGD(Optimizer):
    """SINGA's SGD: g = grad + wd * w; buf = momentum * buf + (1 - dampening) * g (buf starts at
    zero); g = g + momentum * buf if nesterov else buf; w -= lr * g."""

    def __init__(self, lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(lr)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening = 0")
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.weight_decay, self.nesterov = float(weight_decay), bool(nesterov)
        self.moments = {}

    def apply(self, param_name, param_value, param_grad):
        p, g = param_value, param_grad
        if p not in self.moments:
            self.moments[p] = zeros_like(p)
        buf = self.moments[p]
        lr, m, d, wd, nesterov = self.lr, self.momentum, self.dampening, self.weight_decay, \
            self.nesterov
        p.device.exec(lambda: K.sgd_update(_flat(p), _flat(g), _flat(buf), lr, m, d, wd, nesterov),
                      [p.block, g.block, buf.block], [p.block, buf.block])


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; weight decay added to the gradient."""

    def __init__(self, lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr)
        self.beta_1, self.beta_2 = float(beta_1), float(beta_2)
        self.epsilon, self.weight_decay = float(epsilon), float(weight_decay)
        self.moments = {}

    def apply(self, param_name, param_value, param_grad):
        p, g = param_value, param_grad
        if p not in self.moments:
            self.moments[p] = (zeros_like(p), zeros_like(p))
        m, v = self.moments[p]
        t = self.step_counter + 1
        args = (self.lr, self.beta_1, self.beta_2, self.epsilon, self.weight_decay, t)
        p.device.exec(lambda: K.adam_update(_flat(p), _flat(g), _flat(m), _flat(v), *args),
                      [p.block, g.block, m.block, v.block], [p.block, m.block, v.block])
