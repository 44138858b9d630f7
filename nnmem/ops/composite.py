"""Composite operators: one operator made of others, its parts; and SINGA's operators that are
written that way.

    where(x, y, condition)       = condition * x + (1 - condition) * y
    gemm(A, B, C)                = alpha * A' @ B' + beta * C       (A' = A^T if transA, ...)
    mean, sum, max, min (*tensors)     over any number of tensors, pairwise and broadcast
    prelu(x, slope)              = max(x, 0) + slope * min(x, 0)
    cossim(a, b)                 = sum(a b) / (|a| |b|) over the last axis
    globalaveragepool(x)         = the mean over every axis after the channels

A composite's forward runs its parts as ordinary operators, recorded as if called on their own
(Operator.records_parts): each part saves what its own backward reads, and graph mode,
liveness, recomputation, offload and the exporter see every part. The composite adds SINGA's
contract: ``y.creator`` is the composite, and ``y.creator.backward(dy)`` returns the gradient
of every input. It keeps a tape of its parts in the order they ran, and its backward runs
their backward in the reverse order, summing the gradients of a tensor that several parts read.

Memory contract: a composite holds what its parts save, no more (its tape holds no tensor, its
constants are dropped after forward), and frees each part's saved tensors as soon as that
part's backward has run, as autograd.backward does; so its backward runs once. The price of
composing is the parts' intermediates, a few tensors of x's size, where a fused kernel would
keep none.
"""

import weakref

import numpy as np

from nnmem.operation import Operator, active_trace, constant, tracing
from nnmem.ops.arith import Add, Scale
from nnmem.ops.broadcast import binary
from nnmem.ops.linear import TransposedMatmul
from nnmem.ops.pointwise import add_scalar, pow_scalar, sqrt
from nnmem.ops.reduce import reduce_mean, reduce_sum
from nnmem.tensor import Tensor

__all__ = [
    "add_all",
    "cossim",
    "gemm",
    "globalaveragepool",
    "identity",
    "max",
    "mean",
    "min",
    "negative",
    "pow",
    "prelu",
    "sum",
    "where",
]


class Composite(Operator):
    """An operator made of other operators. A subclass writes ``compose(*xs, **constants)``,
    its forward in operators. `constants` are what the constructor was given besides the
    inputs (a target, a mask, a function): a tensor among them is read as a constant
    (``as_constant``), so that no part computes or keeps anything for its gradient, and forward
    drops them all, so that they live no longer than the parts need them."""

    records_parts = True

    def __init__(self, name=None, **constants):
        super().__init__(name)
        self.constants = constants
        self.tape = None  # [(part, per input of the part: the key of what it read)], call order
        self.released = False

    def compose(self, *xs, **constants):
        raise NotImplementedError

    def forward(self, *xs):
        constants, self.constants = self.constants, {}
        constants = {
            k: as_constant(v) if isinstance(v, Tensor) else v for k, v in constants.items()
        }
        if not self.requires_grad:  # no backward: the parts go straight to any active trace
            return self.compose(*xs, **constants)
        tape = Tape(xs, active_trace())
        with tracing(into=tape):
            ys = self.compose(*xs, **constants)
        outputs = ys if isinstance(ys, tuple) else (ys,)
        self.output_keys = [tape.key(y) for y in outputs]
        if any(key is not None and key[0] == "input" for key in self.output_keys):
            raise TypeError(f"{self.name}: compose returned an input; return a new tensor")
        for y in outputs:  # Operator.__call__ numbers the composite's outputs, not the parts'
            vars(y).pop("creator_index", None)
        self.input_meta = [(x.shape, x.dtype) for x in xs]
        self.tape = tape.parts
        return ys

    def backward(self, *dys):
        if self.tape is None and self.released:
            # autograd.backward's walk ran and released it (SINGA's GAN example walks one loss
            # twice): it links to no input any more, and the walk sends nothing on
            return (None,) * len(self.needs_grad) if len(self.needs_grad) > 1 else None
        if self.tape is None:
            raise RuntimeError(
                f"{self.name}: backward has run already (its parts' saved tensors are freed) "
                "or forward ran without training; run the forward pass again"
            )
        if len(dys) != len(self.output_keys):
            raise TypeError(f"{self.name}: backward takes {len(self.output_keys)} gradient(s)")
        tape, self.tape = self.tape, None
        wanted = self._wanted(tape)
        grads = {}
        for key, dy in zip(self.output_keys, dys):
            if key is not None:
                _accumulate(grads, key, dy)
        for j in reversed(range(len(tape))):
            part, keys = tape[j]
            received = [grads.pop((j, i), None) for i in range(len(part.output_meta))]
            part.needs_grad = tuple(key in wanted for key in keys)
            if any(part.needs_grad) and any(g is not None for g in received):
                received = [
                    g if g is not None else constant(*meta, self.device, 0.0)
                    for g, meta in zip(received, part.output_meta)
                ]
                dxs = part.backward(*received)
                dxs = dxs if isinstance(dxs, tuple) else (dxs,)
                for key, dx, needed in zip(keys, dxs, part.needs_grad):
                    if needed and dx is not None:
                        _accumulate(grads, key, dx)
            part.release()
        # autograd.backward waits for a gradient from every input that needs one: an input the
        # parts did not differentiate (or a repeated one) gets zeros.
        dxs = []
        for k, (needed, meta) in enumerate(zip(self.needs_grad, self.input_meta)):
            dx = grads.pop(("input", k), None) if needed else None
            dxs.append(constant(*meta, self.device, 0.0) if needed and dx is None else dx)
        return tuple(dxs) if len(dxs) > 1 else dxs[0]

    def _wanted(self, tape):
        """The keys of the tensors whose gradient leads to an input that needs one."""
        wanted = {("input", k) for k, needed in enumerate(self.needs_grad) if needed}
        for j, (part, keys) in enumerate(tape):
            if any(key in wanted for key in keys):
                wanted.update((j, i) for i in range(len(part.output_meta)))
        return wanted

    def release(self):
        for part, _ in self.tape or ():
            part.release()
        self.tape, self.released = None, True
        super().release()


class Tape:
    """The recorded parts of a composite, in the order they ran: each call is read as it comes
    (tracing(into=tape)) and kept as (part, per input: the key of the tensor it read), the key
    being ("input", k) for the composite's input k (its first position), (j, i) for output i of
    part j, None for a constant. A tensor is known by identity, through a weak reference, so the
    tape keeps no tensor alive; calls are passed on to an exporter's trace (`outer`)."""

    def __init__(self, xs, outer):
        self.parts, self.outer, self.known = [], outer, {}
        for k, x in reversed(list(enumerate(xs))):
            self.known[id(x)] = (weakref.ref(x), ("input", k))

    def key(self, t):
        ref, key = self.known.get(id(t), (None, None))
        return key if ref is not None and ref() is t else None  # an id outlives its tensor

    def append(self, call):
        if self.outer is not None:
            self.outer.append(call)
        part, inputs, outputs = call
        if not part.requires_grad:  # nothing it read needs a gradient: its outputs are constants
            return
        keys = tuple(self.key(x) for x in inputs)
        for i, y in enumerate(outputs):
            self.known[id(y)] = (weakref.ref(y), (len(self.parts), i))
        part.src = []  # the composite's own src links it to the rest of the graph
        self.parts.append((part, keys))


def _accumulate(grads, key, g):
    grads[key] = g if key not in grads else Add()(grads[key], g)


def as_constant(t):
    """t read as a constant: a tensor on t's block that requires no gradient."""
    return Tensor._on_block(t.block, t.shape, t.dtype, t.device)


def as_tensor(value, like):
    """value as a constant tensor of like's dtype: an array or list is copied in, a tensor of
    another dtype (an int32 mask) converted by the device (Cast)."""
    if isinstance(value, Tensor):
        return as_constant(value if value.dtype == like.dtype else value.as_type(like.dtype))
    a = np.asarray(value, dtype=like.dtype)
    return Tensor(a.shape, like.device, like.dtype, requires_grad=False).copy_from_numpy(a)


class Where(Composite):
    """condition * x + (1 - condition) * y, broadcast (ONNX's Where(condition, x, y));
    dx = dy * condition, dy_ = dy * (1 - condition), each summed to its input's shape."""

    def compose(self, x, y, condition):
        c = as_tensor(condition, x)
        not_c = add_scalar(Scale(-1.0)(c), 1.0)
        return binary("add", binary("mul", c, x), binary("mul", not_c, y))


def where(x, y, condition):
    """x where condition holds, y elsewhere; condition: a tensor (float or int32), array or list
    of 0/1 (or booleans). Being arithmetic, it needs finite x and y: an inf or NaN in the branch
    not taken still shows (0 * inf is NaN), so mask with a large finite value (GPT-2's
    finfo.min), not -inf."""
    return Where(condition=condition)(x, y)


class Gemm(Composite):
    """alpha * A' @ B' + beta * C (C broadcast to the product's shape, optional); A' and B'
    are read transposed in place (linear.TransposedMatmul): no transposed copy is kept."""

    def __init__(self, alpha=1.0, beta=1.0, transA=0, transB=0):
        super().__init__()
        self.alpha, self.beta, self.transA, self.transB = alpha, beta, transA, transB

    def compose(self, A, B, C=None):
        y = TransposedMatmul(self.transA, self.transB)(A, B)
        y = Scale(self.alpha)(y) if self.alpha != 1.0 else y
        if C is None:
            return y
        return binary("add", y, C if self.beta == 1.0 else Scale(self.beta)(C))


def gemm(A, B, C=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    """alpha * A' @ B' + beta * C; the gradient of C too when C is given (SINGA's)."""
    inputs = (A, B) if C is None else (A, B, C)
    if C is None and alpha == 1.0:  # one operator already
        return TransposedMatmul(transA, transB)(A, B)
    return Gemm(alpha, beta, transA, transB)(*inputs)


class Fold(Composite):
    """tensors[0] <how> tensors[1] <how> ..., pairwise and broadcast, times `scale`."""

    def __init__(self, how, name, scale=1.0):
        super().__init__(name)
        self.how, self.scale = how, scale

    def compose(self, *tensors):
        total = tensors[0]
        for t in tensors[1:]:
            total = binary(self.how, total, t)
        # one tensor: a copy (the result is a new tensor with a creator, as SINGA's)
        return Scale(self.scale)(total) if self.scale != 1.0 or len(tensors) == 1 else total


def _fold(how, name, tensors, scale=1.0):
    if not tensors:
        raise ValueError(f"{name.lower()}: give at least one tensor")
    return Fold(how, name, scale)(*tensors)


def sum(*tensors):  # noqa: A001 (SINGA's name)
    """tensors[0] + tensors[1] + ..., broadcast."""
    return _fold("add", "Sum", tensors)


add_all = sum


def mean(*tensors):
    """(tensors[0] + tensors[1] + ...) / len(tensors), broadcast."""
    return _fold("add", "Mean", tensors, 1.0 / len(tensors) if tensors else 1.0)


def max(*tensors):  # noqa: A001 (SINGA's name)
    """The elementwise maximum of the tensors (the gradient goes to the first that is largest)."""
    return _fold("max", "Max", tensors)


def min(*tensors):  # noqa: A001 (SINGA's name)
    """The elementwise minimum of the tensors (the gradient goes to the first that is least)."""
    return _fold("min", "Min", tensors)


def pow(a, b):  # noqa: A001 (SINGA's name)
    """a ** b: b a tensor (broadcast) or a number."""
    if isinstance(b, Tensor):
        return binary("pow", a, b)
    return pow_scalar(a, b)


def negative(x):
    return Scale(-1.0)(x)


def identity(x):
    """A copy of x."""
    return Scale(1.0)(x)


class PRelu(Composite):
    """x where x > 0, slope * x elsewhere (slope broadcast against x); dx = dy where x > 0,
    dy * slope elsewhere; dslope = dy * min(x, 0), each summed to its input's shape."""

    def compose(self, x, slope):
        zero = as_tensor(np.zeros((1,) * x.ndim()), x)
        return binary("add", binary("max", x, zero), binary("mul", slope, binary("min", x, zero)))


def prelu(x, slope):
    return PRelu()(x, slope)


class CosSim(Composite):
    """Cosine similarity of the rows (the last axis) of a and b."""

    def compose(self, a, b):
        dot = reduce_sum(binary("mul", a, b), -1, keepdims=False)
        norms = binary("mul", sqrt(reduce_sum(binary("mul", a, a), -1, keepdims=False)),
                       sqrt(reduce_sum(binary("mul", b, b), -1, keepdims=False)))  # fmt: skip
        return binary("div", dot, norms)


def cossim(a, b):
    return CosSim()(a, b)


def globalaveragepool(x, data_format="channels_first"):
    """The mean over every spatial axis, kept with size 1: (N, C, H, W) -> (N, C, 1, 1)."""
    if data_format == "channels_first":
        return reduce_mean(x, tuple(range(2, x.ndim())), keepdims=True)
    if data_format in ("channels_last", "channel_last"):  # SINGA's tests spell it channel_last
        return reduce_mean(x, tuple(range(1, x.ndim() - 1)), keepdims=True)
    raise ValueError(
        f"globalaveragepool: data_format {data_format!r}; use 'channels_first' or 'channels_last'"
    )
