"""Operator: one differentiable operation, and what every operation needs to know.

An Operator's ``forward`` computes outputs from inputs; when gradients are needed it keeps the
tensors its ``backward`` will read (``save``) and remembers where its inputs came from
(``src``); nnmem.autograd's ``backward`` walks that record. This module sits below the
operators (nnmem.ops), which subclass Operator, and below nnmem.autograd, SINGA's public
module, which gathers both.

Memory contract: each operator drops its saved tensors the moment its backward has run, so a
forward activation lives exactly until the backward step that last needs it.
"""

import contextlib
import functools
import math
import threading

import numpy as np

from nnmem.tensor import Tensor


class InputError(ValueError, AssertionError):
    """Bad input to an operator (a shape, an axis): a ValueError, as nnmem raises for bad input,
    and an AssertionError, which SINGA's operators raise from their ``assert``s and SINGA's
    tests expect. The message names the problem and the fix."""


#: Operator.run's `rebuild` value for a call that may simply be run again.
SAME = "same"

_local = threading.local()  # this thread's training flag and layer-name scope
_last_training = [False]  # the value last set by any thread: a new thread's default


def is_training():
    """True while training in this thread: operators then save what backward needs."""
    return getattr(_local, "training", _last_training[0])


def set_training(value):
    """Set this thread's training flag (Model.train/eval, ``autograd.training = ...``)."""
    _local.training = _last_training[0] = bool(value)


def _scope():
    """Names of the layers being called in this thread, innermost last (labels memory)."""
    if not hasattr(_local, "scope"):
        _local.scope = []
    return _local.scope


@contextlib.contextmanager
def name_scope(name):
    """Label the tensors made inside with `name` (the calling layer), for memory reports."""
    scope = _scope()
    scope.append(name)
    try:
        yield
    finally:
        scope.pop()


@contextlib.contextmanager
def tracing(into=None):
    """Record every operator call made in this thread inside the block, for exporters
    (nnmem.sonnx): yields a list that gets one ``(operator, inputs, outputs)`` per call (tuples
    of Tensors), in the order the calls ran, in training and inference alike. The list keeps
    those tensors alive as long as it lives. An inner tracing() block records into its own
    list only. Outside any block the cost is one attribute lookup per operator call.
    `into`: an object with an ``append`` that gets the calls instead of a new list (a
    composite's tape, which reads each call as it comes and keeps no tensor)."""
    trace, outer = ([] if into is None else into), getattr(_local, "trace", None)
    _local.trace = trace
    try:
        yield trace
    finally:
        _local.trace = outer


class _running:
    """Mark `op` as the operator whose forward or backward runs in this thread (a context
    manager: a class, not a contextlib generator, which costs several times as much, and it
    runs at every operator call)."""

    __slots__ = ("op", "outer")

    def __init__(self, op):
        self.op = op

    def __enter__(self):
        self.outer = getattr(_local, "running", None)
        _local.running = self.op

    def __exit__(self, *exception):
        _local.running = self.outer


def _runs_as_backward(backward):
    @functools.wraps(backward)
    def run(self, *dys):
        phase, self.phase = self.phase, "backward"
        try:
            with _running(self):
                return backward(self, *dys)
        finally:
            self.phase = phase  # an operator run forward again records forward kernels

    return run


def running():
    """The operator whose forward or backward is running in this thread, or None."""
    return getattr(_local, "running", None)


def active_trace():
    """The list of the innermost tracing() block running in this thread, or None."""
    return getattr(_local, "trace", None)


class Operator:
    """One differentiable operation. Subclasses write ``forward(*xs)`` and ``backward(*dys)``.

    forward takes and returns Tensors (one, or a tuple); backward takes one gradient per output
    and returns one gradient per input (None where an input needs none). Inside forward:
    ``self.output(shape, dtype)`` makes an output tensor, ``self.run(fn, reads, writes)`` hands
    the kernel call to the device, ``self.save(...)`` keeps tensors for backward.

    The kernel function receives arrays, never tensors: a recorded graph then holds no Python
    reference to any tensor, and its own bookkeeping alone decides when a block is dead.
    """

    differentiable = True
    #: A composite (nnmem/ops/composite.py:Composite) is made of other operators, its parts: an
    #: operator called inside its forward is recorded as if called on its own (its creator, its
    #: saves, its trace entry), so that the composite can run the parts' backward in its own.
    #: The composite itself is not traced: an exporter sees its parts.
    records_parts = False
    #: The gradient is zero wherever it is defined (sign, rounding, shape): the call is recorded,
    #: so that SINGA's ``y.creator.backward(dy)`` gives its zeros, but y requires no gradient
    #: and autograd.backward sends none through it (y is a constant to what reads it).
    gradient_is_zero = False

    def __init_subclass__(cls, **kwargs):
        """A subclass's backward runs as this operator's backward, whoever calls it (the autograd
        walk, or SINGA's tests: ``y.creator.backward(dy)``): its kernels are recorded as
        backward, and an operator called inside it is a part of it (see _run_inside)."""
        super().__init_subclass__(**kwargs)
        if "backward" in vars(cls):
            cls.backward = _runs_as_backward(vars(cls)["backward"])

    def __init__(self, name=None):
        self.name = name or type(self).__name__
        self.src = []  # per input: (creator op or None, output index, leaf param or None)
        self.saved = ()  # tensors kept for backward, dropped right after it
        self.needs_grad = ()  # per input: does backward() compute its gradient?
        self.grad_flows = ()  # per input: does autograd.backward send a gradient into it?
        self.requires_grad = False  # was the call recorded (outputs know their creator)?
        self.device = None
        self.label = self.name
        self.phase = "forward"  # "backward" while backward() runs (recorded with each kernel)

    def __call__(self, *xs):
        enclosing = running()
        if enclosing is not None and not (enclosing.records_parts and enclosing.phase == "forward"):
            return self._run_inside(enclosing, xs)
        self.device = xs[0].device
        for x in xs[1:]:
            if x.device is not self.device:
                raise ValueError(
                    f"{self.name}: inputs live on different devices "
                    f"({self.device} and {x.device}); move them to one device"
                )
        # SINGA's contract: while training, an operation on a tensor that requires a gradient
        # records its creator, and `y.creator.backward(dy)` gives every such input's gradient.
        training = is_training() and self.differentiable
        self.needs_grad = tuple(training and x.requires_grad for x in xs)
        self.requires_grad = any(self.needs_grad)
        # autograd.backward sends a gradient only where it reaches a stored gradient: a leaf
        # that stores none (an input batch) gets none (conv1 skips its backward-data pass), and
        # an operation on such leaves alone is never visited.
        self.grad_flows = tuple(
            needed
            and not self.gradient_is_zero
            and (x.stores_grad or (x.creator is not None and x.creator.feeds_a_gradient))
            for x, needed in zip(xs, self.needs_grad)
        )
        scope = _scope()
        self.label = f"{scope[-1]}:{self.name}" if scope else self.name
        with _running(self):
            ys = self.forward(*xs)
        trace = getattr(_local, "trace", None)
        if trace is not None and not self.records_parts:
            trace.append((self, xs, ys if isinstance(ys, tuple) else (ys,)))
        if not self.requires_grad:
            self.saved = ()
            return ys
        # The walk follows an input only where a gradient flows into it: an operation it never
        # visits (on an input batch, before the first parameter) is not linked, so it and what
        # it saved die with its output instead of living until this operation's backward.
        self.src = [
            (
                x.creator,
                getattr(x, "creator_index", 0),
                x if x.creator is None and x.stores_grad else None,
            )
            if flows
            else (None, 0, None)
            for x, flows in zip(xs, self.grad_flows)
        ]
        outputs = ys if isinstance(ys, tuple) else (ys,)
        self.output_meta = [(y.shape, y.dtype) for y in outputs]
        for i, y in enumerate(outputs):
            y.creator, y.requires_grad = self, not self.gradient_is_zero
            if i:
                y.creator_index = i
        return ys

    @property
    def feeds_a_gradient(self):
        """Does autograd.backward send a gradient through this operation (into some input)?"""
        return any(self.grad_flows)

    def _run_inside(self, enclosing, xs):
        """Called inside another operator's forward or backward (a SINGA-style operator's
        ``singa.ReLU(x)``): this call is a part of that one. Its kernels carry the enclosing
        operator's label and phase; it records no creator, saves nothing, and is not traced."""
        self.device = xs[0].device
        self.needs_grad = self.grad_flows = (False,) * len(xs)
        self.requires_grad = False
        self.label, self.phase = enclosing.label, enclosing.phase
        with _running(enclosing if self.records_parts else self):  # a composite's parts too
            return self.forward(*xs)

    # -- helpers for subclasses -------------------------------------------------------------------
    @property
    def kernels(self):
        """The kernels of the device the inputs live on (nnmem.kernels.cpu, or its CUDA twin:
        the same names and contracts), so one operator serves every kind of device."""
        return self.device.kernels

    def output(self, shape, dtype):
        """A new, not yet allocated tensor labelled with this operator (for memory reports)."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        desc = (self.label, tuple(shape), dtype)  # the block's desc, formatted when first read
        return Tensor._on_block(self.device.new_block(nbytes, desc), shape, dtype, self.device)

    def run(self, fn, reads, writes, inplace=(), rebuild=None, tag=None):
        """Submit a kernel call to the device: it runs ``fn(*write_arrays, *read_arrays)``.

        `inplace` lists (output, input) pairs where the output may take the input's memory
        when this operation is the input's last reader (the kernel must be elementwise-safe).
        `rebuild` says how a cheap forward operation can be run again, exactly, in backward
        (SuperNeurons' recomputation): SAME (the call itself is a pure function of its reads),
        or (fn, reads, writes) of a call that rebuilds the outputs from tensors kept anyway.
        `tag` names what the call computes for graph mode's fusion pass (graph/fuse.py): the
        kernel's name and its scalar arguments, the call's writes and reads being that
        kernel's arguments in its order.
        """
        self.device.exec(
            fn,
            reads,
            writes,
            name=self.label,
            inplace=inplace,
            phase=self.phase,
            rebuild=rebuild,
            tag=tag,
        )

    def save(self, *tensors):
        """Keep tensors for backward (only when a gradient will be computed).

        A saved output is kept as a new Tensor on the same block, without a creator, so that
        output -> operator -> saved output is not a reference cycle (cycles would delay frees
        until the garbage collector runs).
        """
        if self.requires_grad:
            self.saved = tuple(
                None if t is None else Tensor._on_block(t.block, t.shape, t.dtype, t.device)
                for t in tensors
            )
            self.device.keep_for_backward(self.name, [t for t in tensors if t is not None])

    def release(self):
        """Drop what backward needed: its memory can now be recycled."""
        self.saved = ()
        self.src = []

    def forward(self, *xs):
        raise NotImplementedError

    def backward(self, *dys):
        raise NotImplementedError


def constant(shape, dtype, device, value):
    """A tensor filled with `value` by a device operation (so that a recorded step refills it)."""
    t = Tensor(shape, device, dtype, requires_grad=False)
    fill = device.kernels.fill
    device.exec(
        lambda t_: fill(t_.reshape(-1), value),
        reads=(),
        writes=(t,),
        name=f"backward:fill {value}",
        phase="backward",
    )
    return t
