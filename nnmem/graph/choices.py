"""The choices of the optimal plan: for each tensor, what keeping it off the device frees and
what that costs, as milp.py's Choices, built from a recorded step and its liveness plan.

Positions are those of the liveness plan (every tensor kept). For a tensor t that backward
reads, with its last forward use f, its first backward reader b, its copy-out's release point
r (offload._release_points) and its prefetch point:
- recompute: off the device over (f, b); costs its producer's time, and its chain's (the
  cheap tensors no backward node reads, rebuilt on the way and dropped), which are there, with
  the recipe's other outputs, where the rebuild runs (an extra); only if every other tensor
  the rebuild reads is still there at b (recompute.rebuild_candidates, chain());
- offload: off the device over (r, p) with p the start of the backward layer before b's
  (offload.prefetch_ahead); its copies overlap the layer after its producer's and the layer
  of p;
- offload on demand: the same with p the start of b's own layer: a layer less on the device,
  and only the compute of that layer before b to hide the prefetch;
and for a weight gradient that only the commit reads: offload it from its release in backward
to the start of the last backward layer (offload.gradient_candidates).
Pairs that cannot both be taken: a rebuild that reads a tensor that is itself rebuilt, or
offloaded and fetched in another layer than the rebuild runs in (it would be needed earlier).
"""

import numpy as np

from nnmem.graph import milp
from nnmem.graph.liveness import INTERMEDIATE, live_bytes
from nnmem.graph.offload import (
    BACKWARD,
    _release_points,
    backward_layers,
    gradient_candidates,
    layer_of,
    layer_starts,
    offload_candidates,
    prefetch_ahead,
)
from nnmem.graph.recompute import rebuild_candidates
from nnmem.memory.units import aligned_size

#: The decision of an offloaded tensor prefetched at the start of the layer that reads it.
ON_DEMAND = "offload (on demand)"


def problem_of(planner, recorded, kinds):
    """(milp.Problem, the block ids of its tensors) of the recorded step `planner` plans
    (an optimal.OptimalPlanner: its liveness plan, costs and device): see the docstring."""
    plan, costs, device = planner.liveness, planner.costs, planner.device
    position = {node_index: p for p, node_index in enumerate(plan.order)}
    base = np.array(live_bytes(plan.slots, len(plan.order)), dtype=float)

    def round_up(n):
        return aligned_size(n, device.pool.alignment)

    # the layers the copies overlap: runs of forward nodes, and of backward ones, per layer
    windows, compute = {}, {}
    for phases, name in ((("forward",), "forward"), (BACKWARD, "backward")):
        starts = layer_starts(recorded, phases)
        for k, start in enumerate(starts):
            compute[(name, k)] = 0.0
        layer = -1
        for node in recorded:
            if node.phase in phases:
                if layer + 1 < len(starts) and node.index == starts[layer + 1]:
                    layer += 1
                windows[node.index] = (name, layer)
                compute[(name, layer)] += costs.seconds[node.index]
    last_backward = ("backward", len(layer_starts(recorded, BACKWARD)) - 1)

    def next_window(window):
        following = (window[0], window[1] + 1)
        return following if following in compute else window

    activations = offload_candidates(recorded, kinds, "all")
    rebuilds = rebuild_candidates(recorded, kinds)
    gradients = gradient_candidates(recorded, kinds)
    tensors = list(dict.fromkeys(activations + list(rebuilds) + gradients))
    blocks = {id(s.block): s.block for n in recorded for s in n.reads + n.writes}
    last_forward, first_backward, last_writer, last_use = {}, {}, {}, {}
    for p, node_index in enumerate(plan.order):
        for spec in recorded[node_index].reads + recorded[node_index].writes:
            last_use[id(spec.block)] = p

    def chain(key):
        """(the tensors rebuilt on the way and dropped: cheap ones no backward node reads,
        the tensors it reads that must still be there) of rebuilding `key` before its first
        backward reader; None when it reads one that is neither (rebuilding would keep it
        longer than it lives)."""
        at = position[first_backward[key]]
        members, there, stack, seen = [], [], list(rebuilds[key][1]), set()
        while stack:
            k = id(stack.pop())
            if k in seen or kinds.get(k) != INTERMEDIATE:
                continue
            seen.add(k)
            if last_use.get(k, -1) >= at:
                there.append(k)
            elif k in rebuilds and k not in first_backward:
                members.append(k)
                stack.extend(rebuilds[k][1])
            else:
                return None
        return members, there

    for node in recorded:
        for spec in node.reads + node.writes:
            if node.phase == "forward":
                last_forward[id(spec.block)] = node.index
        if node.phase in BACKWARD:
            for spec in node.reads:
                first_backward.setdefault(id(spec.block), node.index)
        if node.phase in ("forward", "backward"):
            for spec in node.writes:
                last_writer[id(spec.block)] = node.index
    index_of = {key: i for i, key in enumerate(tensors)}
    choices, recompute_choice, offload_choice = [], {}, {}
    sources = {}  # recomputed tensor -> the tensors its rebuild needs on the device
    last_start = (backward_layers(recorded) or [None])[-1]
    released = _release_points(recorded, activations, ("forward",))
    released.update(_release_points(recorded, gradients, ("backward",)))
    ahead, demand = {}, {}
    for start, keys in prefetch_ahead(recorded, activations, first_backward).items():
        for key in keys:
            ahead[key] = start
    on_demand = prefetch_ahead(recorded, activations, first_backward, set(activations))
    for start, keys in on_demand.items():
        for key in keys:
            if start != ahead[key]:  # (where it is not the same: the first backward layer)
                # compute in the reader's layer before the reader: all that hides the copy
                hide = sum(costs.seconds[n] for n in range(start, first_backward[key]))
                demand[key] = start, hide
    for key in tensors:
        i, nbytes = index_of[key], round_up(blocks[key].nbytes)
        copy = costs.copy_seconds(blocks[key].nbytes)
        if key in rebuilds and key in first_backward:  # (a rebuilt node's other outputs: not)
            frees = _interval(position[last_forward[key]] + 1, position[first_backward[key]] - 1)
            rebuilt = chain(key) if frees else None
            if rebuilt is not None:
                members, sources[key] = rebuilt
                producers = {rebuilds[k][0] for k in [key] + members}
                seconds = sum(costs.seconds[n.index] for n in producers)
                # every other output of the nodes run again is there while they run
                others = {id(w.block) for n in producers for w in n.writes} - {key}
                at = position[first_backward[key]]
                extra = ((at, sum(round_up(blocks[k].nbytes) for k in others)),)
                recompute_choice[key] = len(choices)
                choices.append(milp.Choice(i, "recompute", nbytes, frees, seconds, (), extra))
        moved_at = ahead.get(key, last_start if key in gradients else None)
        if key in released and moved_at is not None:
            frees = _interval(position[released[key]] + 1, position[moved_at] - 1)
            if frees:
                out = next_window(windows[last_writer[key]])
                back = windows[moved_at] if key in ahead else last_backward
                offload_choice.setdefault(key, []).append(len(choices))
                copies = ((out, copy), (back, copy))
                choices.append(milp.Choice(i, "offload", nbytes, frees, 0.0, copies))
        if key in demand:  # or prefetched at its reader's layer: a layer less on the device
            start, hide = demand[key]
            frees = _interval(position[released[key]] + 1, position[start] - 1)
            if frees:
                out = next_window(windows[last_writer[key]])
                # the copies fetched for one reader share the compute before it
                before = ("before", first_backward[key])
                copies = ((out, copy), (before, copy))
                compute[before] = hide
                offload_choice.setdefault(key, []).append(len(choices))
                choices.append(milp.Choice(i, ON_DEMAND, nbytes, frees, 0.0, copies))
    exclusive = []
    for key, there in sources.items():
        for other in there:
            if other in recompute_choice and other != key:
                exclusive.append((recompute_choice[key], recompute_choice[other]))
            if other in offload_choice:
                same_layer = layer_of(recorded[first_backward[key]]) == layer_of(
                    recorded[first_backward[other]]
                )
                if not same_layer:
                    exclusive += [(recompute_choice[key], c) for c in offload_choice[other]]
    problem = milp.Problem(base, tuple(choices), compute, tuple(exclusive))
    return problem, tensors


def _interval(first, last):
    """((first, last),) or () when empty."""
    return ((first, last),) if first <= last else ()
