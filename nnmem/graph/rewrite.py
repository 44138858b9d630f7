"""What the passes that rewrite a recorded step share (recompute.py, offload.py).

A rewrite never changes what a node computes: it adds nodes, and points readers at another
block holding the same values (a *shadow*: a rebuilt tensor, a prefetched copy). The nodes
keep their kernel functions; only their blocks, their index and their control edges change.
"""

from nnmem.graph.recorder import ArraySpec, Node


def shadow(block, why):
    """A new block of `block`'s size on its device, to hold the same values again."""
    return type(block)(block.device, block.nbytes, f"{block.desc} ({why})")


def through(specs, shadows, replace=lambda block: True):
    """The specs with each block in `shadows` (block id -> block) swapped in where
    `replace(block)` says so; each reader keeps its own view (shape and dtype)."""
    return tuple(
        ArraySpec(shadows[id(s.block)], s.shape, s.dtype)
        if id(s.block) in shadows and replace(s.block)
        else s
        for s in specs
    )


def renumbered(node, index, reads=None, inplace=None, after=None):
    """A copy of `node` at `index`, optionally with other reads, in-place pairs or control
    edges."""
    return Node(
        index,
        node.name,
        node.fn,
        node.writes,
        node.reads if reads is None else reads,
        node.inplace if inplace is None else inplace,
        node.phase,
        node.rebuild,
        node.after if after is None else after,
        node.stream,
        node.tag,
    )
