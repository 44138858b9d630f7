"""Recording a step: while a model records, every ``device.exec`` call becomes a Node, and
nothing runs (SINGA buffers the operations the same way). The step runs afterwards, as a graph.

A Node keeps the kernel function and, for each tensor it reads or writes, an ArraySpec: the
block, the shape and the dtype. ArraySpecs hold no reference count, so recording changes
nothing about which blocks Python holds. The one exception is deliberate: a block whose first
use in the step is a *read* (an input, a parameter, optimizer state, a constant made from
Python) must keep its bytes and its data for every replay, so the recorder holds a tensor on
it.
"""

from typing import NamedTuple

import numpy as np

from nnmem.tensor import Tensor


class ArraySpec(NamedTuple):
    """How a node sees a block: with this shape and dtype."""

    block: object
    shape: tuple
    dtype: np.dtype

    def array(self):
        return self.block.array(self.shape, self.dtype)


class Node:
    """One recorded kernel call: ``fn(*[w.array() for w in writes], *[r.array() for r in reads])``.

    phase: "forward", "backward", "update" (optimizer) or "recompute" (added by recompute.py).
    rebuild: None, SAME, or a Node-like (fn, writes, reads) recipe that rebuilds this node's
    outputs exactly (see Operator.run). after: indices of nodes this one must follow although
    it shares no block with them (keeps a recomputation from being hoisted out of backward).
    stream: "compute" for a kernel call, "copy" for a transfer between device and host memory
    (offload.py): the copy stream runs it beside the compute stream; "marker" for a point of
    the plan where nothing runs (offload.py's release of a block).
    tag: what the call computes, for the fusion pass (fuse.py), or None: the kernel's name and
    its scalar arguments, e.g. ("batchnorm2d_forward_train", momentum, eps), with its writes
    and reads in the order that kernel takes them.
    """

    __slots__ = (
        "index",
        "name",
        "fn",
        "writes",
        "reads",
        "inplace",
        "phase",
        "rebuild",
        "after",
        "stream",
        "tag",
    )

    def __init__(
        self,
        index,
        name,
        fn,
        writes,
        reads,
        inplace,
        phase="forward",
        rebuild=None,
        after=(),
        stream="compute",
        tag=None,
    ):
        self.index, self.name, self.fn = index, name, fn
        self.writes, self.reads, self.inplace = writes, reads, inplace
        self.phase, self.rebuild, self.after = phase, rebuild, tuple(after)
        self.stream, self.tag = stream, tag

    def blocks(self):
        """Every block this node touches, each once, reads first."""
        seen = {}
        for spec in self.reads + self.writes:
            seen.setdefault(id(spec.block), spec.block)
        return list(seen.values())

    def __repr__(self):
        return f"<Node {self.index} {self.name}>"


class Recorder:
    def __init__(self):
        self.nodes = []
        self._seen = set()  # ids of blocks already used in this step
        self._written = set()  # ids of blocks a recorded node writes
        self.held = []  # tensors that keep read-first blocks (and their data) alive

    def record(self, fn, reads, writes, name, inplace, phase="forward", rebuild=None, tag=None):
        for t in reads:
            if id(t.block) not in self._written:
                t.block.check_written()  # read-first: its data must exist already
                if id(t.block) not in self._seen:
                    self.held.append(Tensor._on_block(t.block, t.shape, t.dtype, t.device))
        for t in tuple(reads) + tuple(writes):
            self._seen.add(id(t.block))
        for t in writes:
            self._written.add(id(t.block))
        if rebuild is not None and rebuild != "same":
            fn2, reads2, writes2 = rebuild
            rebuild = (fn2, _specs(writes2), _specs(reads2))
        self.nodes.append(
            Node(
                len(self.nodes),
                name,
                fn,
                _specs(writes),
                _specs(reads),
                tuple((out.block, inp.block) for out, inp in inplace),
                phase,
                rebuild,
                tag=tag,
            )
        )


def _specs(tensors):
    return tuple(ArraySpec(t.block, t.shape, t.dtype) for t in tensors)
