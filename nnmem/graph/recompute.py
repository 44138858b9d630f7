"""Cost-aware recomputation (SuperNeurons, section 3.4): drop cheap forward results, rebuild
them in backward.

Checkpoints are the expensive operations (CONV, FC, joins) and fans (a tensor that several
forward operations read): their outputs stay in memory. A cheap operation (POOL, ACT, BN,
LRN, Dropout) says at recording how to run it again exactly (Operator.run's `recompute`). Its
outputs that backward needs are then dropped right after their last forward use, and rebuilt
from the nearest checkpoints just before backward needs them. A *segment* is a connected group
of cheap operations between checkpoints.

- speed-centric: rebuild a whole segment once, at the first backward use of any of its
  tensors, and keep the rebuilt tensors until their last backward use (fewest recomputations);
- memory-centric: rebuild, for every backward operation, just the chain of tensors it needs,
  and drop them after it (least memory, most recomputations);
- cost-aware: speed-centric for a segment when keeping its rebuilt tensors cannot raise the
  step's peak above the memory-centric peak, memory-centric otherwise. SuperNeurons tests a
  segment's bytes against the largest single layer's working set, which bounds the peak when
  the checkpoints are offloaded to the host; without offloading the checkpoints stay live, so
  nnmem tests the segment against the headroom it would actually have: the memory-centric
  peak minus the bytes live under memory-centric while the segment would be kept.

The rewrite works on recorded nodes: a rebuilt tensor is a new block (a "shadow") written by a
copy of its producer, and the backward nodes read the shadow instead of the original. The
copies compute exactly what the originals did, so recomputation changes no number.
"""
from nnmem.graph.liveness import INTERMEDIATE, storages
from nnmem.graph.recorder import ArraySpec, Node

STRATEGIES = ("none", "speed", "memory", "cost-aware")


def recompute(nodes, kinds, strategy, round_up):
    """(new nodes, number of recomputed operations) for `strategy` (see STRATEGIES)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"recompute={strategy!r}: choose one of {STRATEGIES}")
    if strategy == "none":
        return nodes, 0
    forward = [n for n in nodes if n.phase == "forward"]
    producer, readers = {}, {}
    for node in forward:
        for spec in node.reads:
            readers[id(spec.block)] = readers.get(id(spec.block), 0) + 1
        for spec in node.writes:
            producer[id(spec.block)] = node

    rebuildable_ids = _worth_rebuilding(nodes, forward, producer, readers, kinds)

    def rebuildable(block):
        return id(block) in rebuildable_ids

    segment_of = _segments(forward, producer, rebuildable)
    members = {}
    for node in forward:  # forward order
        if node in segment_of:
            members.setdefault(segment_of[node], []).append(node)
    speed_segments = set(members) if strategy == "speed" else set()
    if strategy == "cost-aware":
        speed_segments = _affordable_segments(nodes, kinds, members, segment_of, producer,
                                              rebuildable, round_up)
    return _rewrite(nodes, members, segment_of, producer, rebuildable, speed_segments)


def _rewrite(nodes, members, segment_of, producer, rebuildable, speed_segments):
    """The nodes with rebuilds inserted: whole segments once for `speed_segments`, per backward
    node for the others. Returns (nodes, number of recomputed operations)."""
    out, count = [], 0
    kept_shadows = {}  # segment -> {block id: shadow block}, for speed-centric segments
    previous = None    # index of the last original node: recomputations run after it
    for node in nodes:
        if node.phase == "forward":
            out.append(_renumbered(node, len(out)))
            previous = len(out) - 1
            continue
        needed = [s.block for s in node.reads if rebuildable(s.block)]
        local = {}
        for block in needed:
            segment = segment_of[producer[id(block)]]
            if segment in speed_segments:
                if segment not in kept_shadows:
                    kept_shadows[segment] = {}
                    for member in members[segment]:
                        out.append(_clone(member, len(out), kept_shadows[segment], rebuildable,
                                          previous))
                        count += 1
                local.update(kept_shadows[segment])
            elif id(block) not in local:
                for member in _chain(block, producer, rebuildable):
                    if any(id(s.block) in local for s in _recipe(member)[1]):
                        continue  # already rebuilt for this node by another chain
                    out.append(_clone(member, len(out), local, rebuildable, previous))
                    count += 1
        out.append(_renumbered(node, len(out), reads=_through(node.reads, local, rebuildable)))
        previous = len(out) - 1
    return out, count


def _affordable_segments(nodes, kinds, members, segment_of, producer, rebuildable, round_up):
    """Segments that may be rebuilt once and kept without raising the memory-centric peak.

    Live bytes are taken per original backward node under memory-centric recomputation (in
    recording order); a segment kept from its first to its last backward use is accepted if
    those live bytes plus its own stay within the memory-centric peak everywhere in between.
    Accepted segments add their bytes, so the next ones see less headroom. The estimate counts
    an accepted segment's memory-centric rebuilds too, so it errs on the safe side."""
    rewritten, _ = _rewrite(nodes, members, segment_of, producer, rebuildable, set())
    kinds = dict(kinds)
    for node in rewritten:
        for block in node.blocks():
            kinds.setdefault(id(block), INTERMEDIATE)
    order = list(range(len(rewritten)))
    delta = [0] * (len(rewritten) + 1)
    for storage in storages(rewritten, order, kinds, round_up, inplace=True):
        delta[storage.first] += storage.nbytes
        delta[storage.last + 1] -= storage.nbytes
    live, running = [], 0
    for position in order:
        running += delta[position]
        live.append(running)
    peak = max(live, default=0)
    # Live bytes at each original non-forward node: the max over it and its rebuilds.
    at_node, current = [], 0
    for position, node in enumerate(rewritten):
        current = max(current, live[position])
        if node.phase not in ("forward", "recompute"):
            at_node.append(current)
            current = 0
    backward = [n for n in nodes if n.phase != "forward"]
    uses = {}
    for i, node in enumerate(backward):
        for spec in node.reads:
            if rebuildable(spec.block):
                segment = segment_of[producer[id(spec.block)]]
                first, _ = uses.get(segment, (i, i))
                uses[segment] = (first, i)
    accepted = set()
    for segment, (first, last) in sorted(uses.items(), key=lambda item: item[1]):
        extra = sum(round_up(s.block.nbytes) for m in members[segment] for s in _recipe(m)[1])
        if max(at_node[first:last + 1]) + extra <= peak:
            accepted.add(segment)
            for i in range(first, last + 1):
                at_node[i] += extra
    return accepted


def _worth_rebuilding(nodes, forward, producer, readers, kinds):
    """Ids of the blocks to drop after forward and rebuild in backward.

    Candidates: what a cheap node's recipe writes, unless it is a fan (read by several forward
    nodes) or outlives the step. A candidate is worth dropping only if every tensor its rebuild
    starts from is kept anyway: a parameter, an input, or a tensor backward reads itself.
    Otherwise rebuilding would keep that starting tensor alive longer than it lives now (with
    an in-place ReLU, a conv's output *is* the ReLU's output: rebuilding the ReLU would keep
    both). Dropping a candidate is undone until nothing changes.
    """
    candidates = {id(s.block) for node in forward if node.recompute is not None
                  for s in _recipe(node)[1]
                  if kinds.get(id(s.block)) == INTERMEDIATE and readers.get(id(s.block), 0) <= 1}
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
    if node.recompute == "same":
        return node.fn, node.writes, node.reads
    return node.recompute


def _segments(forward, producer, rebuildable):
    """{node: segment id}: cheap nodes joined through the rebuildable tensors they pass on."""
    parent = {}

    def find(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n
    for node in forward:
        if node.recompute is not None:
            parent[node] = node
    for node in forward:
        if node not in parent:
            continue
        for spec in _recipe(node)[2]:
            source = producer.get(id(spec.block))
            if source in parent and rebuildable(spec.block):
                parent[find(node)] = find(source)
    return {node: id(find(node)) for node in parent}


def _chain(block, producer, rebuildable):
    """The cheap nodes that rebuild `block` from kept tensors, in forward order."""
    order, seen, stack = [], set(), [producer[id(block)]]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        for spec in _recipe(node)[2]:
            if rebuildable(spec.block):
                stack.append(producer[id(spec.block)])
    return sorted(order, key=lambda n: n.index)


def _clone(node, index, shadows, rebuildable, after):
    """A copy of `node`'s recipe writing new blocks (recorded in `shadows`) and reading the
    rebuilt versions of its rebuildable inputs; it runs after node `after`."""
    fn, writes, reads = _recipe(node)
    reads = _through(reads, shadows, rebuildable)
    for spec in writes:
        block = spec.block
        shadows[id(block)] = type(block)(block.device, block.nbytes, f"{block.desc} (recomputed)")
    new_writes = _through(writes, shadows, lambda block: True)
    # In place only over a rebuilt input: a kept tensor is still needed later.
    inplace = tuple((shadows[id(o)], shadows[id(i)]) for o, i in node.inplace
                    if id(o) in shadows and id(i) in shadows and rebuildable(i))
    return Node(index, f"{node.name} (recompute)", fn, new_writes, reads, inplace,
                "recompute", None, () if after is None else (after,))


def _through(specs, shadows, rebuildable):
    """The specs with rebuilt blocks put in, each reader keeping its own view (shape)."""
    return tuple(ArraySpec(shadows[id(s.block)], s.shape, s.dtype)
                 if rebuildable(s.block) and id(s.block) in shadows else s for s in specs)


def _renumbered(node, index, reads=None):
    return Node(index, node.name, node.fn, node.writes, node.reads if reads is None else reads,
                node.inplace, node.phase, node.recompute, node.after)


