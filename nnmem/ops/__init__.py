"""The differentiable operators, one family per file, and their functional forms (SINGA names).

Each family's module lists its public names in its ``__all__``; this package gathers them all
(autograd re-exports them: ``autograd.relu``, ``autograd.conv2d``, ...), and
``attach_to_tensor`` gives Tensor the arithmetic written with them.
"""

import importlib

from nnmem import tensor as _tensor_module
from nnmem.ops import tensor_functions, tensor_methods
from nnmem.ops.arith import reshape
from nnmem.tensor import Tensor

#: The operator families, a module each, in the order their names are gathered.
FAMILIES = tuple(
    importlib.import_module(f"{__name__}.{family}")
    for family in (
        "activation arith batchnorm broadcast composite conv dropout embedding host_ops layernorm "
        "linear loss lrn pointwise pooling rearrange reduce scatter shape softmax transform"
    ).split()
)
# A family's name is bound after its module: ops.softmax and ops.shape are the functions.
for _family in FAMILIES:
    globals().update((name, getattr(_family, name)) for name in _family.__all__)

# SINGA's autograd names for the arithmetic and comparisons of nnmem/ops/tensor_functions.py:
# tensors of one shape, broadcast shapes, or a tensor and a number.
add, sub, mul = tensor_functions.add, tensor_functions.sub, tensor_functions.eltwise_mult
less, greater, equal = tensor_functions.lt, tensor_functions.gt, tensor_functions.eq

__all__ = [name for family in FAMILIES for name in family.__all__]
__all__ += ["add", "sub", "mul", "less", "greater", "equal"]


def attach_to_tensor():
    """Make a Tensor's arithmetic differentiable (``t + u`` is ``add(t, u)``, and
    ``t.reshape(shape)``, ``t.sum()``, ... are operators too: tensor_methods.TENSOR_METHODS),
    and give nnmem.tensor SINGA's functions (``tensor.sum``, ``tensor.mult``, ...:
    tensor_functions.FUNCTIONS).

    nnmem.tensor sits below the operators and cannot import them, so they are attached from
    here: nnmem/__init__ calls this once, when nnmem is imported, before any tensor is made."""
    Tensor.reshape = reshape
    for name, method in tensor_methods.TENSOR_METHODS.items():
        setattr(Tensor, name, method)
    for name in tensor_functions.FUNCTIONS:
        setattr(_tensor_module, name, getattr(tensor_functions, name))
