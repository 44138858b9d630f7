"""Fusion: the first pass over a recorded step, before recomputation, offload and the planner.

A memory-bound operation reads its input from memory and writes its output back; two in a row
make two passes over the same values, and an intermediate tensor between them. Where a step
records such a chain, this pass puts one kernel call in its place (kernels/*/fused.py), which
makes one pass and never writes the intermediate:

    forward                               backward
    BatchNorm2d + ReLU                    ReLU' + BatchNorm2d'      (the gradient of the BN
    BatchNorm2d + Add + ReLU (a residual  ReLU' + BatchNorm2d', the  output is not written;
      join: relu(bn(x) + r))                residual's gradient     with a residual join it
                                            written once            is, for the shortcut)
    bias + ReLU (Conv2d's, Linear's)      ReLU' + the bias's gradient

Each fused kernel gives the bits of the kernels it replaces run one after the other (the same
expressions in the same order, and the same sums: kernels/cpu/fused.py), so a fused step's
numbers are the unfused step's, bit for bit, and fusion is on by default
(``Model.compile(..., fuse=True)``).

When a chain fuses. The operators tag their kernel calls (Operator.run's `tag`: the kernel's
name and scalars); a chain is a set of tagged nodes where each intermediate block is written by
one node of the chain and read by the next one only, and is an INTERMEDIATE (nothing outside
the step sees it). The fused node takes the place of one of the chain's nodes; the others are
moved to it, which is allowed when no node in between touches what the moved node writes, or
writes what it reads (dependences kept). The later place is tried first: the chain's outputs
then start where they started before (the unfused step's liveness peak is never exceeded by
outputs made early). Only float32 and float64 calls fuse: a float16 chain rounds each
intermediate tensor to float16 where a fused kernel (on float32 copies) would not, so the bits
would differ. And only on a device whose kernels include the fused ones.

Memory: every intermediate block a fusion removes is a block the planner no longer places.
Where the ReLU already wrote in place over the BatchNorm's output (the planner merges such
pairs), no byte is saved at that position; elsewhere the live set shrinks. The arena is laid out
again by the greedy layout (memory/layout.py), a heuristic: on ResNet-20 at batch 32 both steps
have the same lower bound and both layouts meet it, but a fused layout can land above an
unfused one. ``nnmem plan`` prints the saving (or the loss), ``CompiledStep.fusion_saving()``
returns it. A plan that offloads, and the
optimal plan, start from the unfused recording instead (``CompiledStep.recording`` says why).
"""

from typing import NamedTuple

import numpy as np

from nnmem.graph.liveness import INTERMEDIATE, block_kinds
from nnmem.graph.recorder import Node
from nnmem.graph.rewrite import renumbered, through

#: dtypes of the fused kernels
FUSIBLE = (np.dtype(np.float32), np.dtype(np.float64))


class Fusion(NamedTuple):
    """What the pass did to a step, for the learner (``nnmem plan`` prints it)."""

    chains: dict  # fused operation ("BatchNorm2d+ReLU", ...) -> kernel calls, both directions
    removed: int  # intermediate tensors no longer written
    saved_bytes: int  # a plan's arena, unfused less fused (CompiledStep.fusion_saving)

    @classmethod
    def of(cls, fusions, saved_bytes):
        """From fuse()'s list of (name, removed blocks) and the bytes saved."""
        chains = {}
        for name, _ in fusions:
            op = name.rpartition(":")[2]
            chains[op] = chains.get(op, 0) + 1
        return cls(chains, sum(len(removed) for _, removed in fusions), saved_bytes)


class _Step:
    """The recorded nodes as slots (None where a node was fused away), and who reads and
    writes each block."""

    def __init__(self, nodes):
        self.slots = list(nodes)
        self.kinds = block_kinds(nodes)[0]
        self.readers, self.writers = {}, {}
        for i, node in enumerate(nodes):
            self._index(i, node)

    def _index(self, i, node):
        for spec in node.reads:
            self.readers.setdefault(id(spec.block), []).append(i)
        for spec in node.writes:
            self.writers.setdefault(id(spec.block), []).append(i)

    def tagged(self, i, *names):
        node = self.slots[i] if i is not None else None
        return node is not None and node.tag is not None and node.tag[0] in names

    def sole_reader(self, spec, writer):
        """The slot of the one node that reads `spec`'s block, when `writer` alone writes it
        and it is an intermediate; else None."""
        key = id(spec.block)
        readers = self.readers.get(key, [])
        if self.kinds.get(key) != INTERMEDIATE or self.writers.get(key) != [writer]:
            return None
        return readers[0] if len(readers) == 1 else None

    def place(self, chain):
        """The slot among `chain`'s where all of them may run as one node, or None."""
        for target in sorted(chain, reverse=True):
            if all(self._may_move(i, target, chain) for i in chain):
                return target
        return None

    def _may_move(self, i, target, chain):
        node = self.slots[i]
        reads = {id(s.block) for s in node.reads}
        writes = {id(s.block) for s in node.writes}
        lo, hi = sorted((i, target))
        for k in range(lo + 1, hi):
            other = self.slots[k]
            if other is None or k in chain:
                continue
            if any(id(s.block) in reads | writes for s in other.writes):
                return False
            if any(id(s.block) in writes for s in other.reads):
                return False
        return True

    def replace(self, chain, target, fused):
        """Put `fused` at slot `target` and empty the chain's other slots. A slot is listed
        only under the blocks its node reads or writes, so only those lists change: scanning
        every block's list at each fusion made the pass quadratic in the step's length
        (ResNet-2669 at 224x224: minutes of a 4-minute plan)."""
        touched = {
            id(s.block) for i in chain for s in (*self.slots[i].reads, *self.slots[i].writes)
        }
        for i in chain:
            self.slots[i] = None
        self.slots[target] = fused
        for table in (self.readers, self.writers):
            for key in touched:
                users = table.get(key)
                if users is not None:
                    users[:] = [u for u in users if u not in chain]
        self._index(target, fused)


def fuse(nodes, kernels):
    """(nodes, fusions): `nodes` with every chain above replaced by one fused node, numbered
    again in order, and a list of (fused node's name, blocks removed) per fusion. Nothing
    changes where `kernels` lacks the fused kernels."""
    if not hasattr(kernels, "batchnorm2d_relu_forward_train"):
        return list(nodes), []
    step, fusions, redirect = _Step(nodes), [], {}
    for i in range(len(nodes)):
        for rule in _RULES:
            done = rule(step, i, kernels)
            if done is not None:
                name, removed, moved = done
                fusions.append((name, removed))
                redirect.update(moved)
                break
    out = []
    for node in step.slots:
        if node is None:
            continue
        if redirect:
            node = _redirected(node, redirect)
        out.append(renumbered(node, len(out)))
    return out, fusions


# -- the rules: each looks at the node in slot i, and fuses the chain it starts, or returns None


def _float(*nodes):
    return all(s.dtype in FUSIBLE for n in nodes for s in n.reads + n.writes)


def _fuse(step, chain, name, fn, writes, reads, inplace=(), rebuild=None):
    """Fuse `chain` (slots) into one node; None when no place is legal."""
    nodes = [step.slots[i] for i in chain]
    if not _float(*nodes) or len({n.phase for n in nodes}) != 1:
        return None
    target = step.place(chain)
    if target is None:
        return None
    fused = Node(target, name, fn, writes, reads, inplace, nodes[0].phase, rebuild)
    step.replace(chain, target, fused)
    return fused


def _named(node, fused):
    """A fused node's name: the layer of `node` ("layer:Op" -> "layer"), then `fused`, the same
    forward and backward (as an operator's kernels are named): "bn1:BatchNorm2d+ReLU"."""
    layer, colon, _ = node.name.rpartition(":")
    return f"{layer}{colon}{fused}"


def _batchnorm_forward(step, i, K):
    """BatchNorm2d (training) + ReLU, or + Add + ReLU: z = relu(bn(x) [+ r])."""
    if not step.tagged(i, "batchnorm2d_forward_train"):
        return None
    bn = step.slots[i]
    _, momentum, eps = bn.tag
    y, mean, invstd, rm, rv = bn.writes
    x, gamma, beta = bn.reads[:3]
    j = step.sole_reader(y, i)
    if step.tagged(j, "relu_forward"):
        relu = step.slots[j]
        (z,) = relu.writes
        run = K.batchnorm2d_relu_forward_train
        apply = K.batchnorm2d_relu_forward_apply
        fused = _fuse(
            step,
            (i, j),
            _named(bn, "BatchNorm2d+ReLU"),
            lambda z_, m_, s_, rm_, rv_, x_, g_, b_, _rm, _rv: run(
                z_, m_, s_, rm_, rv_, x_, g_, b_, momentum, eps
            ),
            (z, mean, invstd, rm, rv),
            bn.reads,
            rebuild=(apply, (z,), (x, gamma, beta, mean, invstd)),
        )
        return None if fused is None else (fused.name, [y], {})
    if not step.tagged(j, "add"):
        return None
    add = step.slots[j]
    a, b = add.reads
    if a.block is b.block:
        return None
    r = b if a.block is y.block else a
    k = step.sole_reader(add.writes[0], j)
    if not step.tagged(k, "relu_forward"):
        return None
    relu = step.slots[k]
    (z,) = relu.writes
    run = K.batchnorm2d_add_relu_forward_train
    apply = K.batchnorm2d_add_relu_forward_apply
    fused = _fuse(
        step,
        (i, j, k),
        _named(bn, "BatchNorm2d+Add+ReLU"),
        lambda z_, m_, s_, rm_, rv_, x_, g_, b_, r_, _rm, _rv: run(
            z_, m_, s_, rm_, rv_, x_, g_, b_, r_, momentum, eps
        ),
        (z, mean, invstd, rm, rv),
        (x, gamma, beta, r, rm, rv),
        rebuild=(apply, (z,), (x, gamma, beta, r, mean, invstd)),
    )
    return None if fused is None else (fused.name, [y, add.writes[0]], {})


def _relu_backward(step, i, K):
    """ReLU's backward + BatchNorm2d's backward, or + a bias's gradient (Conv2d's, Linear's)."""
    if not step.tagged(i, "relu_backward"):
        return None
    relu = step.slots[i]
    (ds,) = relu.writes
    dz, z = relu.reads
    readers = [j for j in step.readers.get(id(ds.block), []) if j != i]
    if step.kinds.get(id(ds.block)) != INTERMEDIATE or step.writers.get(id(ds.block)) != [i]:
        return None
    for j in readers:
        node = step.slots[j]
        if step.tagged(j, "batchnorm2d_backward") and node.reads[0].block is ds.block:
            dx, dgamma, dbeta = node.writes
            rest = node.reads[1:]  # x, gamma, saved_mean, saved_invstd
            if len(readers) == 1:  # the gradient of the BN's output is read by nothing else
                fn = K.batchnorm2d_relu_backward
                name = _named(node, "BatchNorm2d+ReLU")
                fused = _fuse(step, (i, j), name, fn, (dx, dgamma, dbeta), (dz, z) + rest)
                return None if fused is None else (fused.name, [ds], {})
            fn = K.batchnorm2d_add_relu_backward
            fused = _fuse(
                step,
                (i, j),
                _named(node, "BatchNorm2d+Add+ReLU"),
                fn,
                (dx, dgamma, dbeta, ds),
                (dz, z) + rest,
                inplace=((ds.block, dz.block),),
            )
            return None if fused is None else (fused.name, [], {})
    for j in readers:
        node = step.slots[j]
        if step.tagged(j, "bias_grad_nchw", "sum_rows"):
            fn = (
                K.relu_backward_bias_grad_nchw
                if node.tag[0] == "bias_grad_nchw"
                else K.relu_backward_sum_rows
            )
            (db,) = node.writes
            fused = _fuse(
                step,
                (i, j),
                _named(node, "bias+ReLU"),
                fn,
                (ds, db),
                (dz, z),
                inplace=((ds.block, dz.block),),
            )
            return None if fused is None else (fused.name, [], {})
    return None


def _bias_forward(step, i, K):
    """A bias + ReLU: Conv2d's (in place on y: z's readers then read y) or Linear's."""
    if not step.tagged(i, "add_bias_nchw", "add_bias_rows"):
        return None
    bias = step.slots[i]
    (y,) = bias.writes
    if bias.tag[0] == "add_bias_rows":
        j = step.sole_reader(y, i)
        if not step.tagged(j, "relu_forward"):
            return None
        relu = step.slots[j]
        (z,) = relu.writes
        x, b = bias.reads
        fused = _fuse(
            step,
            (i, j),
            _named(bias, "bias+ReLU"),
            K.add_bias_rows_relu,
            (z,),
            (x, b),
            inplace=((z.block, x.block),),
        )
        return None if fused is None else (fused.name, [y], {})
    # Conv2d's bias is added in place (y is read and written by this node); its ReLU reads y
    # and writes z. Fused: relu(y + b) in place, and whatever read z reads y.
    key = id(y.block)
    readers = [j for j in step.readers.get(key, []) if j != i]
    if len(readers) != 1 or not step.tagged(readers[0], "relu_forward"):
        return None
    j = readers[0]
    relu = step.slots[j]
    (z,) = relu.writes
    if step.kinds.get(key) != INTERMEDIATE or step.kinds.get(id(z.block)) != INTERMEDIATE:
        return None
    if step.writers.get(id(z.block)) != [j] or z.shape != y.shape or z.dtype != y.dtype:
        return None
    # z's other readers come after the ReLU: nothing may write y between them and it
    later = [w for w in step.writers.get(key, []) if w > j]
    if later:
        return None
    run = K.add_bias_relu_nchw
    fused = _fuse(
        step,
        (i, j),
        _named(bias, "bias+ReLU"),
        lambda y_, b_, _: run(y_, b_),
        (y,),
        bias.reads,
    )
    return None if fused is None else (fused.name, [z], {id(z.block): y.block})


_RULES = (_batchnorm_forward, _bias_forward, _relu_backward)


def _redirected(node, redirect):
    """`node` with every block in `redirect` (block id -> block) swapped in."""
    rebuilt = node.rebuild[1] + node.rebuild[2] if isinstance(node.rebuild, tuple) else ()
    if not any(id(s.block) in redirect for s in node.reads + node.writes + rebuilt):
        return node
    return Node(
        node.index,
        node.name,
        node.fn,
        through(node.writes, redirect),
        through(node.reads, redirect),
        tuple((redirect.get(id(o), o), redirect.get(id(i), i)) for o, i in node.inplace),
        node.phase,
        _redirected_rebuild(node.rebuild, redirect),
        node.after,
        node.stream,
        node.tag,
    )


def _redirected_rebuild(rebuild, redirect):
    """A rebuild recipe (fn, writes, reads) reads the redirected block too; None and SAME stay."""
    if not isinstance(rebuild, tuple):
        return rebuild
    fn, writes, reads = rebuild
    return (fn, through(writes, redirect), through(reads, redirect))
