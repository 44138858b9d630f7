"""SINGA's ``opt`` module: the optimizers a training program names (``opt.SGD(lr=0.05)``,
``opt.DistOpt(opt.Adam())``) and the learning-rate schedules, gathered from where each is
written:

- nnmem/optim/schedules.py: DecayScheduler, Constant, ExponentialDecay;
- nnmem/optim/optimizer.py: Optimizer, the base with the two-phase step and the state;
- nnmem/optim/update_rules.py: SGD, RMSProp, AdaGrad, Adam;
- nnmem/dist_opt.py: DistOpt, data-parallel training (it wraps an optimizer).

Contract: exactly SINGA's public names (``__all__``), nothing else: names are imported, not
modules, so that ``dir(opt)`` lists what a SINGA program may use.
"""

from nnmem.dist_opt import DistOpt
from nnmem.optim.optimizer import Optimizer
from nnmem.optim.schedules import Constant, DecayScheduler, ExponentialDecay
from nnmem.optim.update_rules import SGD, AdaGrad, Adam, RMSProp

__all__ = [
    "Optimizer",
    "SGD",
    "RMSProp",
    "AdaGrad",
    "Adam",
    "DecayScheduler",
    "Constant",
    "ExponentialDecay",
    "DistOpt",
]
