"""Cost-aware recomputation (SuperNeurons, section 3.4): drop cheap forward results, rebuild
them in backward.

Checkpoints are the expensive operations (CONV, FC, joins) and fans (a tensor that several
forward operations read): their outputs stay in memory. A cheap operation (POOL, ACT, BN,
LRN, Dropout) says at recording how to run it again exactly (Operator.run's `rebuild`). Its
outputs that backward needs are then dropped right after their last forward use, and rebuilt
from the nearest checkpoints just before backward needs them. A *segment* is a connected group
of cheap operations between checkpoints.

- speed-centric: keep every rebuilt tensor until its last backward use, so a segment is
  rebuilt once, at its first use in backward (fewest recomputations);
- memory-centric: keep nothing: for every backward operation, rebuild just the chain of
  tensors it needs, and drop them after it (least memory, most recomputations);
- cost-aware: keep a rebuilt tensor only where that cannot raise the step's peak above the
  memory-centric peak. SuperNeurons decides per segment, testing its bytes against the largest
  single layer's working set, which bounds the peak when the checkpoints are offloaded to the
  host. nnmem does not offload yet, so the checkpoints stay live; it tests each rebuilt tensor
  against the headroom it would actually have (the memory-centric peak minus the bytes live
  under memory-centric while the tensor would be kept), which keeps the guarantee, and, per
  tensor rather than per segment, keeps small tensors (a pooled output, its argmax) while
  rebuilding large ones (an LRN output) again.

The rewrite works on recorded nodes: a rebuilt tensor is a new block (a "shadow") written by a
copy of its producer, and the backward nodes read the shadow instead of the original. The
copies compute exactly what the originals did, so recomputation changes no number.
"""

from nnmem.graph.liveness import INTERMEDIATE, live_bytes, slots
from nnmem.graph.recorder import Node
from nnmem.graph.rewrite import renumbered, shadow, through
from nnmem.search import largest_fitting

POLICIES = ("none", "speed", "memory", "cost-aware")


def add_recomputation(nodes, kinds, policy, round_up, chosen=None):
    """(new nodes, number of recomputed operations) for `policy` (see POLICIES).

    `chosen`: instead of a policy, the ids of the blocks to drop after forward and rebuild in
    backward, each rebuilt once and kept until its last backward use (speed-centric), as the
    optimal planner decides them (graph/optimal.py); each must be one of rebuild_candidates'.
    Their chains (cheap tensors no backward node reads) are rebuilt with them and dropped."""
    if chosen is not None:
        producer, rebuildable_ids = _producers_and_candidates(nodes, kinds)
        unknown = set(chosen) - rebuildable_ids
        if unknown:
            raise ValueError(f"{len(unknown)} chosen block(s) cannot be rebuilt: a bug in nnmem")
        # what no backward node reads is dead after forward: a chosen tensor's rebuild makes
        # it again on the way (and drops it after), as memory-centric does
        read_later = {id(s.block) for n in nodes if n.phase != "forward" for s in n.reads}
        dropped = set(chosen) | {k for k in rebuildable_ids if k not in read_later}
        return _rewrite(nodes, producer, lambda b: id(b) in dropped, set(chosen))
    if policy not in POLICIES:
        raise ValueError(f"recompute={policy!r}: choose one of {POLICIES}")
    if policy == "none":
        return nodes, 0
    producer, rebuildable_ids = _producers_and_candidates(nodes, kinds)

    def rebuildable(block):
        return id(block) in rebuildable_ids

    if policy == "speed":
        keep = set(rebuildable_ids)
    elif policy == "memory":
        keep = set()
    else:
        keep = _affordable(nodes, kinds, producer, rebuildable, round_up)
    return _rewrite(nodes, producer, rebuildable, keep)


def rebuild_candidates(nodes, kinds):
    """{block id: (the forward node that makes it, the blocks its rebuild reads)} for every
    block recomputation may drop and rebuild (_worth_rebuilding), in forward order."""
    producer, candidates = _producers_and_candidates(nodes, kinds)
    return {
        key: (producer[key], [s.block for s in _recipe(producer[key])[2]])
        for key in sorted(candidates, key=lambda k: producer[k].index)
    }


def _producers_and_candidates(nodes, kinds):
    """({block id: its forward producer}, the ids of the blocks worth rebuilding)."""
    forward = [n for n in nodes if n.phase == "forward"]
    producer, readers = {}, {}
    for node in forward:
        for spec in node.reads:
            readers[id(spec.block)] = readers.get(id(spec.block), 0) + 1
        for spec in node.writes:
            producer[id(spec.block)] = node
    return producer, _worth_rebuilding(nodes, forward, producer, readers, kinds)


def _rewrite(nodes, producer, rebuildable, keep):
    """The nodes with rebuilds inserted before the backward nodes that read dropped tensors.
    A rebuilt tensor whose id is in `keep` is kept for later backward nodes; the others are
    rebuilt again where needed. Returns (nodes, number of recomputed operations).

    A node's rebuilds wait (control edges) for the node before it and for the last node that
    read rebuilt tensors: without the second edge, BFS order would start the rebuilds of
    several backward nodes as soon as they may, side by side, and memory-centric's tensors,
    meant to live for one operation each, would be live together."""
    out, count = [], 0
    kept = {}  # block id -> rebuilt block, for kept tensors
    previous = None  # index of the last original node: recomputations run after it
    consumer = None  # index of the last node that read a rebuilt tensor
    for node in nodes:
        if node.phase == "forward":
            out.append(renumbered(node, len(out)))
            previous = len(out) - 1
            continue
        local = dict(kept)
        after = tuple(i for i in dict.fromkeys((previous, consumer)) if i is not None)
        for spec in node.reads:
            if not rebuildable(spec.block) or id(spec.block) in local:
                continue
            for member in _chain(spec.block, producer, rebuildable, local):
                out.append(_clone(member, len(out), local, rebuildable, after))
                count += 1
                for written in _recipe(member)[1]:
                    if id(written.block) in keep:
                        kept[id(written.block)] = local[id(written.block)]
        reads = through(node.reads, local, rebuildable)
        out.append(renumbered(node, len(out), reads=reads))
        previous = len(out) - 1
        if reads != node.reads:
            consumer = previous
    return out, count


def _affordable(nodes, kinds, producer, rebuildable, round_up):
    """Ids of rebuilt tensors that may be kept without raising the memory-centric peak.

    Live bytes are taken per original backward node under memory-centric recomputation (in
    recording order); a tensor kept from its first to its last backward use is accepted if
    those live bytes plus its own stay within the memory-centric peak at every node in between
    where memory-centric would not hold it anyway. Candidates are tried smallest first, and
    accepted ones add their bytes, so the next ones see less headroom. The estimate is not
    exact (which rebuilt copies are live at a node's busiest moment varies), so the accepted
    list is then cut to its longest prefix whose real rewritten step stays within the
    memory-centric peak."""
    rewritten, _ = _rewrite(nodes, producer, rebuildable, set())
    live = _live_bytes(rewritten, kinds, round_up)
    peak = max(live, default=0)
    # Live bytes at each original non-forward node: the max over it and its rebuilds.
    at_node, current = [], 0
    for position, node in enumerate(rewritten):
        current = max(current, live[position])
        if node.phase not in ("forward", "recompute"):
            at_node.append(current)
            current = 0
    backward = [n for n in nodes if n.phase != "forward"]
    uses = {}  # rebuilt tensor -> backward nodes where memory-centric rebuilds it
    for i, node in enumerate(backward):
        for spec in node.reads:
            if rebuildable(spec.block):
                for member in _chain(spec.block, producer, rebuildable, {}):
                    for written in _recipe(member)[1]:
                        uses.setdefault(id(written.block), set()).add(i)
    nbytes = {id(s.block): round_up(s.block.nbytes) for n in nodes for s in n.writes}
    accepted = []
    # Smallest first: a small tensor kept saves as many rebuilds as a large one. Keeping a
    # tensor adds its bytes between its uses; at a use, memory-centric holds it anyway.
    for key, used in sorted(uses.items(), key=lambda item: (nbytes[item[0]], min(item[1]))):
        between = [i for i in range(min(used), max(used) + 1) if i not in used]
        if all(at_node[i] + nbytes[key] <= peak for i in between):
            accepted.append(key)
            for i in between:
                at_node[i] += nbytes[key]

    # The estimate orders the candidates; the real peak decides: keep the longest prefix of
    # them whose rewritten step stays within the memory-centric peak (a binary search).
    def within(count):
        trial, _ = _rewrite(nodes, producer, rebuildable, set(accepted[:count]))
        return max(_live_bytes(trial, kinds, round_up), default=0) <= peak

    if within(len(accepted)):  # the usual case: one check
        return set(accepted)
    # Keeping none of them is the memory-centric step itself (within(0) holds): search from
    # one kept tensor, and keep none when even that does not fit.
    return set(accepted[: largest_fitting(within, range(1, len(accepted))) or 0])


def _live_bytes(nodes, kinds, round_up):
    """Bytes of intermediate slots live at each position of the serial order."""
    kinds = dict(kinds)
    for node in nodes:
        for block in node.blocks():
            kinds.setdefault(id(block), INTERMEDIATE)
    order = list(range(len(nodes)))
    return live_bytes(slots(nodes, order, kinds, round_up, inplace=True), len(nodes))


def _worth_rebuilding(nodes, forward, producer, readers, kinds):
    """Ids of the blocks to drop after forward and rebuild in backward.

    Candidates: what a cheap node's recipe writes, unless it is a fan (read by several forward
    nodes) or outlives the step. A candidate is worth dropping only if every tensor its rebuild
    starts from is kept anyway: a parameter, an input, or a tensor backward reads itself.
    Otherwise rebuilding would keep that starting tensor alive longer than it lives now (with
    an in-place ReLU, a conv's output *is* the ReLU's output: rebuilding the ReLU would keep
    both). Dropping a candidate is undone until nothing changes.
    """
    candidates = {
        id(s.block)
        for node in forward
        if node.rebuild is not None
        for s in _recipe(node)[1]
        if kinds.get(id(s.block)) == INTERMEDIATE and readers.get(id(s.block), 0) <= 1
    }
    read_in_backward = {id(s.block) for n in nodes if n.phase != "forward" for s in n.reads}
    changed = True
    while changed:
        changed = False
        for key in sorted(candidates, key=lambda k: producer[k].index):
            for spec in _recipe(producer[key])[2]:
                root = id(spec.block)
                if root in candidates or kinds.get(root) != INTERMEDIATE:
                    continue  # a dropped input is checked as a candidate of its own
                if root not in read_in_backward:  # rebuilding would extend its life
                    candidates.discard(key)
                    changed = True
                    break
    return candidates


def _recipe(node):
    """(fn, writes, reads) that rebuild the node's outputs."""
    if node.rebuild == "same":
        return node.fn, node.writes, node.reads
    return node.rebuild


def _chain(block, producer, rebuildable, available):
    """The cheap nodes that rebuild `block` from kept tensors and from the rebuilt ones in
    `available` (block id -> rebuilt block), in forward order."""
    order, seen, stack = [], set(), [producer[id(block)]]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        for spec in _recipe(node)[2]:
            if rebuildable(spec.block) and id(spec.block) not in available:
                stack.append(producer[id(spec.block)])
    return sorted(order, key=lambda n: n.index)


def _clone(node, index, shadows, rebuildable, after):
    """A copy of `node`'s recipe writing new blocks (recorded in `shadows`) and reading the
    rebuilt versions of its rebuildable inputs; it runs after the nodes in `after`."""
    fn, writes, reads = _recipe(node)
    reads = through(reads, shadows, rebuildable)
    for spec in writes:
        block = spec.block
        shadows[id(block)] = shadow(block, "recomputed")
    new_writes = through(writes, shadows)
    # In place only over a rebuilt input: a kept tensor is still needed later.
    inplace = tuple(
        (shadows[id(o)], shadows[id(i)])
        for o, i in node.inplace
        if id(o) in shadows and id(i) in shadows and rebuildable(i)
    )
    return Node(
        index,
        f"{node.name} (recompute)",
        fn,
        new_writes,
        reads,
        inplace,
        "recompute",
        None,
        after,
    )
