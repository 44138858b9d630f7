"""nnmem: a Numba deep-learning framework whose subject is memory.

SINGA's user API: ``from nnmem import tensor, device, layer, model, opt, autograd``.
"""

from nnmem import autograd, device, layer, model, opt, tensor  # noqa: F401

__version__ = "0.8.0"
