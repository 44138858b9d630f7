"""From ONNX operators to nnmem's: one converter per operator type, in a family per file.

A converter is a function ``convert(call, *inputs)`` registered with ``@converts(...)``. It
receives the node's inputs (nnmem Tensors, or NumPy arrays for the inputs the registration
names `static`: shapes, axes, pads, which a static plan must know before the step), reads the
node's attributes through ``call.attr(name, default)``, and returns the outputs (one value or
a tuple): Tensors made by nnmem's operators (nnmem.autograd), so that eager steps, graph mode,
every memory technique and the backward pass treat an imported model like any other.

The registration states what the converter understands: the attributes it reads and the
opsets it covers. ``check(node, opset)`` refuses anything else at import (graph.py), with one
line that names the node, the operator, the opset and what is missing.
"""

import importlib
from typing import NamedTuple

#: op_type -> Converter
REGISTRY = {}


class Converter(NamedTuple):
    fn: object
    attributes: frozenset  # the attributes the converter reads (any other is refused)
    static: tuple  # input positions that must be known on the host (shapes, axes, pads)
    states: tuple  # input positions that are state, not learned (BatchNorm's statistics)
    opsets: tuple  # (first, last) opset of the default domain it implements
    folded: bool  # may run on the host at import when its inputs are constants


def converts(*op_types, attributes=(), static=(), states=(), opsets=(1, 28), folded=True):
    """Register the decorated function as the converter of `op_types` (see the docstring)."""

    def register(fn):
        for op_type in op_types:
            REGISTRY[op_type] = Converter(
                fn, frozenset(attributes), tuple(static), tuple(states), opsets, folded
            )
        return fn

    return register


class Unsupported(ValueError):
    """An operator, attribute or opset no converter implements."""


def check(node, opset):
    """Refuse `node` at import if no converter implements it as written."""
    where = f"node {node.name!r} ({node.op_type}, opset {opset})"
    converter = REGISTRY.get(node.op_type)
    if converter is None:
        raise Unsupported(f"{where}: operator {node.op_type} is not supported by nnmem")
    first, last = converter.opsets
    if not first <= opset <= last:
        raise Unsupported(f"{where}: nnmem implements {node.op_type} for opsets {first}-{last}")
    unknown = sorted(set(node.attrs) - converter.attributes)
    if unknown:
        raise Unsupported(f"{where}: attribute(s) {unknown} are not supported")


def never_folded(op_type):
    """True for operators that must run in the step even on constant inputs (random ones)."""
    converter = REGISTRY.get(op_type)
    return converter is not None and not converter.folded


class Call:
    """What a converter knows of the node it converts: its attributes, its name, the opset,
    and the model it runs in (for state such as BatchNorm's running statistics)."""

    def __init__(self, node, opset, rep):
        self.node, self.opset, self.rep = node, opset, rep

    def attr(self, name, default=None):
        return self.node.attrs.get(name, default)

    def fail(self, problem):
        """An error that names the node (a value the converter cannot take)."""
        return Unsupported(
            f"node {self.node.name!r} ({self.node.op_type}, opset {self.opset}): {problem}"
        )


# The families register their converters when imported.
for _family in ("cnn", "dense", "elementwise", "tensors"):
    importlib.import_module(f"{__name__}.{_family}")
