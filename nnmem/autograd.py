"""Autograd, SINGA's module: ``backward`` walks what the operators recorded, and every
operator is here by name (``autograd.relu(x)``, ``autograd.Operator``).

``backward(loss)`` runs the operators in reverse, iteratively (a 1000-layer chain must not hit
Python's recursion limit), and yields each parameter's gradient as soon as it is final.

``autograd.training`` says whether operators save what backward needs. It is kept per thread
(see nnmem.operation): a thread evaluating one model cannot switch off another's training.
"""

import sys
import types

from nnmem import operation
from nnmem.operation import SAME, Operator, constant, name_scope  # noqa: F401 (SINGA's names)
from nnmem.operation import Operator as Operation  # noqa: F401 (SINGA's older name)
from nnmem.ops import *  # noqa: F401,F403  (autograd.relu, autograd.conv2d, ...)
from nnmem.ops.arith import Add

#: The value of ``autograd.training`` last set by any thread (see _Module).
training = False


class _Module(types.ModuleType):
    """This module, with ``training`` read from and written to this thread's flag. Setting it
    also writes the module global, which only ``mock.patch.object`` and friends look at."""

    @property
    def training(self):
        return operation.is_training()

    @training.setter
    def training(self, value):
        operation.set_training(value)
        self.__dict__["training"] = bool(value)


sys.modules[__name__].__class__ = _Module


def backward(y, dy=None):
    """Yield (parameter, gradient) pairs for every parameter that `y` depends on.

    Each gradient is yielded as soon as every operator that used the parameter has contributed
    to it. `y` is usually the scalar loss; `dy` defaults to ones.
    """
    if y.creator is None or not y.creator.feeds_a_gradient:
        raise ValueError(
            "backward(y): no gradient can flow into y: it was computed with "
            "autograd.training off (model.eval(); use model.train() or "
            "autograd.training = True before the forward pass), or from tensors "
            "none of which needs a gradient (no parameter, no requires_grad=True)"
        )
    if dy is None:
        dy = constant(y.shape, y.dtype, y.device, 1.0)
    pending = _count_consumers(y.creator)
    grads = {y.creator: {getattr(y, "creator_index", 0): dy}}
    ready = [y.creator]
    while ready:
        # A stack (LIFO): finishing one branch before starting another keeps fewer gradients alive.
        op = ready.pop()
        received = grads.pop(op)
        dys = [received.get(i) for i in range(len(op.output_meta))]
        for i, g in enumerate(dys):
            if g is None:  # an output nobody used: its gradient is zero
                shape, dtype = op.output_meta[i]
                dys[i] = constant(shape, dtype, op.device, 0.0)
        op.needs_grad = op.grad_flows  # compute only the gradients that flow on
        dxs = op.backward(*dys)
        dxs = dxs if isinstance(dxs, tuple) else (dxs,)
        src = op.src
        op.release()
        del received, dys
        for (creator, index, leaf), dx, needed in zip(src, dxs, op.grad_flows):
            if not needed or dx is None:
                continue
            key = creator if creator is not None else leaf
            slot = grads.setdefault(key, {})
            slot[index] = dx if index not in slot else _accumulate(slot[index], dx)
            pending[key] -= 1
            if pending[key] == 0:
                if creator is None:
                    yield leaf, grads.pop(leaf)[0]
                else:
                    ready.append(creator)


def gradients(y, dy=None):
    """{parameter: gradient} for every parameter that `y` depends on (SINGA's)."""
    return Gradients(backward(y, dy))


class Gradients(dict):
    """{parameter: gradient}. SINGA's gradients() keys them by ``id(parameter)`` (its tests
    read ``grads[id(p)]``): an int key finds the parameter of that id."""

    def __missing__(self, key):
        if isinstance(key, int):
            for parameter, gradient in self.items():
                if id(parameter) == key:
                    return gradient
        raise KeyError(key)


def _accumulate(total, dx):
    """total + dx: a gradient that reaches a tensor by a second path. Recorded as backward
    (it runs in backward; the passes that rewrite a step tell forward and backward apart by
    their phase)."""
    op = Add()
    op.phase = "backward"
    return op(total, dx)


def _count_consumers(root):
    """How many gradient contributions each operator and parameter will receive (iteratively)."""
    pending = {}
    stack, seen = [root], {root}
    while stack:
        op = stack.pop()
        for (creator, _, leaf), needed in zip(op.src, op.grad_flows):
            if not needed:
                continue
            key = creator if creator is not None else leaf
            pending[key] = pending.get(key, 0) + 1
            if creator is not None and creator not in seen:
                seen.add(creator)
                stack.append(creator)
    return pending
