"""SINGA's four update rules, each an Optimizer subclass that says how one parameter is
updated: SGD (with momentum, dampening, Nesterov), RMSProp, AdaGrad and Adam.

Contract: a rule declares its hyperparameters (Hyperparameter descriptors, checked when set),
its state tensors per parameter (_STATES: get_states' name, the memory reports' name), and
queues its update kernel with the hyperparameters read when the update runs, so that a
replayed graph sees a changed learning rate and follows a schedule. The two-phase step, the
state and the checkpoints are the base's (nnmem/optim/optimizer.py).
"""

from nnmem.optim.optimizer import Optimizer
from nnmem.optim.schedules import Hyperparameter, initial_value
from nnmem.tensor import float32


def _not_negative(optimizer, *names):
    """SINGA refuses a negative momentum or weight decay (a schedule's, at its start)."""
    for name in names:
        if initial_value(getattr(optimizer, name)) < 0:
            raise ValueError(f"{type(optimizer).__name__}: {name} must not be negative")


class SGD(Optimizer):
    """SINGA's SGD: g = grad + wd * w; buf = momentum * buf + (1 - dampening) * g (buf starts at
    zero); g = g + momentum * buf if nesterov else buf; w -= lr * g. Momentum is used when its
    initial value is not 0. Every hyperparameter may be a schedule; dtype is SINGA's (stored)."""

    momentum = Hyperparameter()
    dampening = Hyperparameter()
    weight_decay = Hyperparameter()
    _STATES = (("moments", "SGD momentum"),)

    def __init__(
        self,
        lr=0.1,
        momentum=0.0,
        dampening=0.0,
        weight_decay=0.0,
        nesterov=False,
        dtype=float32,
    ):
        super().__init__(lr, dtype)
        self.momentum, self.dampening, self.weight_decay = momentum, dampening, weight_decay
        _not_negative(self, "momentum", "weight_decay")
        if nesterov and (initial_value(self.momentum) <= 0 or initial_value(self.dampening) != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening = 0")
        self.nesterov = bool(nesterov)

    def apply(self, param_name, param_value, param_grad):
        def launch(sgd_update, p_, g_, buf_, steps_):  # hyperparameters read when it runs
            hyper = self._values("lr", "momentum", "dampening", "weight_decay")
            sgd_update(p_, g_, buf_, *hyper, self.nesterov, steps_)

        self._queue_update(param_name, param_value, param_grad, "sgd_update", launch)


class RMSProp(Optimizer):
    """SINGA's RMSProp: g = grad + wd * w; avg = rho * avg + (1 - rho) * g^2 (avg starts at
    zero); w -= lr * g / sqrt(avg + epsilon) (epsilon under the square root, as in SINGA).
    Every hyperparameter may be a schedule."""

    rho = Hyperparameter(decay_rate=True)
    epsilon = Hyperparameter(non_negative=True)
    weight_decay = Hyperparameter()
    _STATES = (("running_average", "RMSProp running average"),)

    def __init__(self, lr=0.1, rho=0.9, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr)
        self.rho, self.epsilon, self.weight_decay = rho, epsilon, weight_decay
        _not_negative(self, "weight_decay")

    def apply(self, param_name, param_value, param_grad):
        def launch(rmsprop_update, p_, g_, avg_, steps_):  # hyperparameters read when it runs
            rmsprop_update(
                p_, g_, avg_, steps_, *self._values("lr", "rho", "epsilon", "weight_decay")
            )

        self._queue_update(param_name, param_value, param_grad, "rmsprop_update", launch)


class AdaGrad(Optimizer):
    """SINGA's AdaGrad: g = grad + wd * w; history += g^2 (history starts at zero);
    w -= lr * g / sqrt(history + epsilon). Every hyperparameter may be a schedule."""

    epsilon = Hyperparameter(non_negative=True)
    weight_decay = Hyperparameter()
    _STATES = (("history", "AdaGrad history"),)

    def __init__(self, lr=0.1, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr)
        self.epsilon, self.weight_decay = epsilon, weight_decay
        _not_negative(self, "weight_decay")

    def apply(self, param_name, param_value, param_grad):
        def launch(adagrad_update, p_, g_, hist_, steps_):  # hyperparameters read when it runs
            adagrad_update(p_, g_, hist_, steps_, *self._values("lr", "epsilon", "weight_decay"))

        self._queue_update(param_name, param_value, param_grad, "adagrad_update", launch)


class Adam(Optimizer):
    """Adam (Kingma & Ba) as SINGA has it: g = grad + wd * w; m = beta_1 * m + (1 - beta_1) * g;
    v = beta_2 * v + (1 - beta_2) * g^2 (both start at zero); with t the step (1 first),
    w -= lr * (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon). Every hyperparameter
    may be a schedule."""

    beta_1 = Hyperparameter(decay_rate=True)
    beta_2 = Hyperparameter(decay_rate=True)
    epsilon = Hyperparameter(non_negative=True)
    weight_decay = Hyperparameter()
    _STATES = (("m", "Adam m"), ("v", "Adam v"))

    def __init__(self, lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr)
        self.beta_1, self.beta_2 = beta_1, beta_2
        self.epsilon, self.weight_decay = epsilon, weight_decay
        _not_negative(self, "weight_decay")

    def apply(self, param_name, param_value, param_grad):
        def launch(adam_update, p_, g_, m_, v_, steps_):  # hyperparameters read when it runs
            hyper = self._values("lr", "beta_1", "beta_2", "epsilon", "weight_decay")
            adam_update(p_, g_, m_, v_, steps_, *hyper)

        self._queue_update(param_name, param_value, param_grad, "adam_update", launch)
