"""What a learner reads from a compiled step's plan (plan.py): its figures, its live sets, its
tensors for the memory viewer, its convolution algorithms, its graph as text, its planned
timeline.

Every function reads a Plan (and, where it reports them, the bytes that stay allocated outside
the arena: CompiledStep.persistent_bytes); none changes it. CompiledStep's methods of the same
names call them.
"""

from nnmem.graph.liveness import END, INPUT, INTERMEDIATE, PARAMETER, live_bytes
from nnmem.graph.schedule import dependencies
from nnmem.memory.timeline import Timeline


def memory_summary(plan, persistent_bytes):
    """The plan's figures: the bytes that stay allocated outside the arena (parameters,
    optimizer state, inputs, results, and anything else in the pool: "persistent_bytes"), the
    arena of the intermediate blocks and its lower bound (the most intermediate bytes live at
    once: "arena_lower_bound_bytes"), the step's lower bound (persistent + the arena's lower
    bound: "lower_bound_bytes", the figure every timeline and table calls "lower bound", see
    memory/timeline.py), blocks, slots, in-place merges."""
    intermediates = sum(1 for k in plan.kinds.values() if k == INTERMEDIATE)
    return {
        "nodes": len(plan.nodes),
        "order": "serial" if plan.sequential else "bfs",
        "recompute_policy": plan.recompute_policy,
        "recomputations": plan.recomputations,
        "offload": plan.offload,
        "offloaded_tensors": plan.offloaded,
        "host_arena_bytes": plan.host_layout.arena_bytes,
        "intermediate_blocks": intermediates,
        "slots": len(plan.slots),
        "inplace_merges": intermediates - len(plan.slots),
        "persistent_bytes": persistent_bytes,
        "lower_bound_bytes": step_lower_bound(plan, persistent_bytes),
        "arena_lower_bound_bytes": plan.layout.lower_bound,
        "arena_bytes": plan.layout.arena_bytes,
        "arena_over_arena_lower_bound": plan.layout.arena_bytes / max(plan.layout.lower_bound, 1),
    }


def step_lower_bound(plan, persistent_bytes):
    """The step's lower bound: its persistent bytes + the most intermediate bytes live at once
    (the arena's lower bound). No layout of the plan's slots holds fewer bytes in its pool."""
    return persistent_bytes + plan.layout.lower_bound


def live_sets(plan):
    """Per position of the replay order: (operation, in set, out set), the descriptions of the
    intermediate tensors live before and after it (SuperNeurons' liveness sets). A tensor
    leaves the out set of its last use."""
    live_from, live_until = {}, {}
    for slot in plan.slots:
        for block, (first, last) in zip(slot.blocks, slot.ranges):
            live_from.setdefault(first, []).append(block.desc)
            live_until.setdefault(last, []).append(block.desc)
    positions, live = [], set()
    for position, i in enumerate(plan.order):
        before = frozenset(live)
        live |= set(live_from.get(position, ()))
        live -= set(live_until.get(position, ()))
        positions.append((plan.nodes[i].name, before, frozenset(live)))
    return positions


def live_tensors(plan, persistent_bytes):
    """Every tensor of the plan, with when and where it lives: what the memory viewer
    (memory/viewer.py) shows at each operation. Plain data, ready for JSON:

    - "tensors": one row per intermediate block, [name, shape, bytes, slot, first,
      last, flags]: its description, its shape as the first kernel that touches it sees it,
      its own bytes, the index of its slot, its live range (positions in the replay
      order: the operation that makes it and the last one that uses it), and flags among
      "in place" (it took over the slot of the tensor before it), "offloaded" (copied
      out to host memory), "prefetched" (that copy brought back for backward),
      "recomputed" (rebuilt in backward);
    - "slots": one row per slot, [bytes, offset, first, last]: the bytes the plan
      reserves (rounded up to the pool's alignment; in-place tensors share them) at this
      offset in the arena, over the union of its tensors' ranges;
    - "persistent": the blocks outside the arena, [name, shape, bytes, kind] (parameters
      and optimizer state, inputs, results), and "persistent_bytes", all of the pool
      outside the arena (those blocks, rounded up, and anything else allocated);
    - "host": the offloaded tensors' copies in the host pool, [name, bytes, first, last],
      and "host_bytes", the host pool's arena for them;
    - "phases": per position, its node's phase ("forward", "backward", "recompute",
      "update");
    - "arena_bytes", "arena_lower_bound_bytes": the layout's figures (the lower bound of the
      whole step is the planned timeline's, memory/timeline.py).

    At position p the curve of the step's planned timeline is persistent_bytes + the bytes of
    the slots with first <= p <= last, and the tensors live there are the rows with
    first <= p <= last."""
    shapes, flags, blocks = _views(plan)
    tensors = []
    for index, slot in enumerate(plan.slots):
        for k, (block, (first, last)) in enumerate(zip(slot.blocks, slot.ranges)):
            marks = (["in place"] if k else []) + flags.get(id(block), [])
            tensors.append([block.desc, shapes[id(block)], block.nbytes, index, first, last, marks])
    slots = [
        [s.nbytes, offset, s.first, s.last] for s, offset in zip(plan.slots, plan.layout.offsets)
    ]
    kept = (PARAMETER, INPUT, END)
    persistent = [
        [block.desc, shapes[key], block.nbytes, plan.kinds[key]]
        for key, block in blocks.items()
        if plan.kinds[key] in kept
    ]
    host = [
        [block.desc, block.nbytes, first, last]
        for s in plan.host_slots
        for block, (first, last) in zip(s.blocks, s.ranges)
    ]
    return {
        "tensors": tensors,
        "slots": slots,
        "persistent": persistent,
        "persistent_bytes": persistent_bytes,
        "host": host,
        "host_bytes": plan.host_layout.arena_bytes,
        "phases": [plan.nodes[i].phase for i in plan.order],
        "arena_bytes": plan.layout.arena_bytes,
        "arena_lower_bound_bytes": plan.layout.lower_bound,
    }


def _views(plan):
    """({block id: shape}, {block id: flags}, {block id: block}) over the replay order: the
    shape the first kernel touching a block sees (a transfer sees only bytes), and which
    blocks a copy-out reads, a prefetch writes, a recomputation writes."""
    kernel_shapes, any_shapes, flags, blocks = {}, {}, {}, {}
    for i in plan.order:
        node = plan.nodes[i]
        for spec in node.writes + node.reads:
            key = id(spec.block)
            blocks.setdefault(key, spec.block)
            any_shapes.setdefault(key, list(spec.shape))
            if node.stream == "compute":
                kernel_shapes.setdefault(key, list(spec.shape))
        if node.stream == "copy":
            out = node.fn.direction == "out"
            block = node.reads[0].block if out else node.writes[0].block
            flags.setdefault(id(block), []).append("offloaded" if out else "prefetched")
        elif node.phase == "recompute":
            for spec in node.writes:
                flags.setdefault(id(spec.block), []).append("recomputed")
    return {**any_shapes, **kernel_shapes}, flags, blocks


def conv_algorithms(plan):
    """{"layer:op pass": algorithm} for every convolution pass that chose its algorithm by
    timing (Conv2d's "auto", with a workspace that fits): what its first run chose, fixed
    for the replays."""
    chosen = {}
    for i in plan.order:
        node = plan.nodes[i]
        pass_name, algorithm = getattr(node.fn, "conv_algorithm", (None, None))
        if pass_name is not None:
            chosen[f"{node.name} {pass_name}"] = algorithm()
    return chosen


def describe(plan, label, limit=None):
    """The graph of the step `label` as text: nodes in replay order with the blocks they read
    and write (the first `limit` of them; all with None)."""
    names, edges = {}, sum(len(p) for p in dependencies(plan.nodes))

    def short(spec):
        key = id(spec.block)
        names.setdefault(key, f"b{len(names)}")
        return f"{names[key]}:{plan.kinds[key][:5]}"

    lines = [
        f"graph of {label}: {len(plan.nodes)} nodes, {edges} edges, "
        f"{'serial' if plan.sequential else 'BFS'} order"
    ]
    for position, i in enumerate(plan.order[:limit]):
        node = plan.nodes[i]
        reads = " ".join(short(s) for s in node.reads)
        writes = " ".join(short(s) for s in node.writes)
        lines.append(f"{position:4d}  {node.name[:34]:34} reads {reads:32} writes {writes}")
    if limit is not None and len(plan.order) > limit:
        lines.append(f"  ... {len(plan.order) - limit} more")
    return "\n".join(lines)


def planned_timeline(plan, persistent_bytes, persistent_blocks):
    """Bytes and live tensors at each position: persistent + the slots live there; with the
    pool's peak and the step's lower bound."""
    n = len(plan.order)
    bytes_in_use = [persistent_bytes + b for b in live_bytes(plan.slots, n)]
    delta_live = [0] * (n + 1)
    for s in plan.slots:
        for first, last in s.ranges:
            delta_live[first] += 1
            delta_live[last + 1] -= 1
    live, c = [], persistent_blocks
    for position in range(n):
        c += delta_live[position]
        live.append(c)
    names = [plan.nodes[i].name for i in plan.order]
    return Timeline(
        f"graph ({'serial' if plan.sequential else 'BFS'})",
        names,
        bytes_in_use,
        live,
        pool_peak=persistent_bytes + plan.layout.arena_bytes,
        lower_bound=step_lower_bound(plan, persistent_bytes),
    )
