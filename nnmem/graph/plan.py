"""The plan of a compiled step: what a recorded step becomes before anything is placed.

`make_plan` is a function of the recorded nodes (fused already: fuse.py, the first pass, runs
when the step is compiled), the policies and the device's pool settings (alignment, recycling,
host memory); it allocates nothing and changes no block:
1. the rewriting passes add nodes and point readers at new blocks: recomputation drops cheap
   forward results and rebuilds them in backward (recompute.py), then offloading copies
   activations out to host memory after forward made them and prefetches them for backward
   (offload.py; the shared machinery is rewrite.py);
2. the replay order (serial or BFS, schedule.py), the commit phase (optimizer updates) last;
3. the slots of the intermediate blocks, with their live ranges in that order, in-place pairs
   merged (liveness.py), and their layout: an offset for each slot (memory/layout.py); the
   offloaded tensors' host copies get slots and a layout of their own.
The executor (executor.py) places a Plan in the device's arenas and replays it; report.py
reads it for the learner. vDNN's dynamic offload policy ("dyn") is chosen here too, by
planning each policy and keeping the first that fits the pool's budget.

A plan is made either from policies (the papers' rules: memory="heuristic") or from
Decisions, tensor by tensor, as the optimal planner chose them (optimal.py): the same
rewrites, the same order, slots and layout; only who decides differs.
"""

from dataclasses import dataclass, replace

from nnmem.graph.liveness import HOST, INTERMEDIATE, block_kinds, slots
from nnmem.graph.offload import add_offload
from nnmem.graph.recompute import add_recomputation
from nnmem.graph.schedule import replay_order
from nnmem.memory.layout import layout
from nnmem.memory.units import aligned_size, format_bytes


@dataclass(frozen=True)
class Decisions:
    """Per tensor, what the optimal planner decided (optimal.py): the ids of the recorded
    blocks to drop after forward and rebuild once in backward, and of those to copy out to
    host memory and prefetch back (activations and weight gradients; see
    offload.add_offload); `on_demand`: those of them prefetched at the start of the layer
    that reads them rather than one layer ahead. Every other tensor is kept, and so is every
    convolution pass's workspace, as the step was recorded with it."""

    recompute: frozenset = frozenset()
    offload: tuple = ()
    on_demand: frozenset = frozenset()  # offloaded, prefetched at their reader's layer


@dataclass(frozen=True, eq=False)
class Plan:
    """A compiled step's static memory plan. A position is an index into `order`.

    - sequential: True for the serial replay order, False for BFS (schedule.py);
    - recycle: the device's ``recycle`` switch the plan was made under; False is the
      baseline: every intermediate block kept from its first use to the end of the step, none
      sharing bytes (liveness.slots). A replay under the other setting replans (executor.py);
    - recompute_policy: the recompute policy asked for ("none", "speed", "memory",
      "cost-aware"; "cost-aware" keeps its name where it dropped every recomputation), or
      "optimal" for a plan made from Decisions;
    - offload: the offload policy applied ("none", "conv", "all"; "dyn" is resolved before),
      or "optimal";
    - decisions: the Decisions the plan was made from, or None (made from the policies);
    - recomputations: how many operations recomputation added;
    - offloaded: how many tensors offloading copies out to host memory;
    - nodes: the recorded nodes with the passes' nodes added;
    - kinds: {id(block): kind} for every block the nodes touch (liveness.py);
    - order: the indices of `nodes` in replay order;
    - commit_start: the position of the commit phase's first operation (optimizer updates);
    - slots: the slots (liveness.Slot) of the intermediate blocks, with live ranges in
      positions;
    - layout: their offsets in the device's graph arena, its bytes and its lower bound
      (memory/layout.py);
    - host_slots: the slots of the offloaded tensors' host copies;
    - host_layout: their offsets in the host pool's graph arena.
    """

    sequential: bool
    recycle: bool
    recompute_policy: str
    offload: str
    decisions: object
    recomputations: int
    offloaded: int
    nodes: list
    kinds: dict
    order: list
    commit_start: int
    slots: list
    layout: object
    host_slots: list
    host_layout: object


class PlanTooLarge(MemoryError):
    """offload="dyn": no policy fits the budget (`needed` bytes with offload="all")."""

    def __init__(self, needed, budget):
        self.needed, self.budget = needed, budget
        super().__init__(
            f"offload='dyn': even offloading every activation, this step needs "
            f"{format_bytes(needed)} of pool, over the budget of {format_bytes(budget)}"
        )


def make_plan(recorded, recorded_kinds, device, sequential, recompute, offload, decisions=None):
    """The Plan of the step recorded as `recorded` (nodes) with `recorded_kinds` (their
    blocks' kinds when it was recorded), on `device`, in serial or BFS order, with a
    recompute and an offload policy, or with `decisions` (Decisions: the policies are then
    not used).

    "cost-aware" recomputation is kept only where it lowers the peak: it frees a tensor by
    keeping what rebuilds it, and where the peak sits elsewhere (in the commit phase, or on
    tensors offloading already moved) that trade only adds bytes and work; the plan then has
    no recomputation. "speed" and "memory" are applied as asked."""
    if decisions is not None:
        return plan_as_asked(recorded, recorded_kinds, device, sequential, "", "", decisions)
    planned = plan_as_asked(recorded, recorded_kinds, device, sequential, recompute, offload)
    if recompute == "cost-aware" and planned.recomputations:
        without = plan_as_asked(recorded, recorded_kinds, device, sequential, "none", offload)
        if without.layout.arena_bytes < planned.layout.arena_bytes:
            return replace(without, recompute_policy=recompute)
    return planned


def plan_as_asked(recorded, recorded_kinds, device, sequential, recompute, offload, decisions=None):
    """make_plan's arguments, its Plan before the cost-aware rule: every policy as asked."""

    def round_up(n):
        return aligned_size(n, device.pool.alignment)

    rebuilt = moved = None
    if decisions is not None:
        rebuilt, moved = decisions.recompute, decisions.offload
        recompute = offload = "optimal"
    nodes, recomputations = add_recomputation(
        recorded, recorded_kinds, recompute, round_up, chosen=rebuilt
    )
    nodes, offloaded = add_offload(
        nodes,
        block_kinds(nodes)[0],
        offload,
        device.host,
        moved,
        decisions.on_demand if decisions is not None else frozenset(),
    )
    kinds, _ = block_kinds(nodes)
    order, commit_start = replay_order(nodes, sequential)
    recycle = device.recycle
    arena_slots = slots(nodes, order, kinds, round_up=round_up, recycle=recycle)
    # the host copies are the intermediates of the host pool; the rest is not planned there
    host_kinds = {k: INTERMEDIATE if v == HOST else v + " (device)" for k, v in kinds.items()}
    host_slots = slots(nodes, order, host_kinds, round_up=round_up, inplace=False)
    return Plan(
        sequential=sequential,
        recycle=recycle,
        recompute_policy=recompute,
        offload=offload,
        decisions=decisions,
        recomputations=recomputations,
        offloaded=offloaded,
        nodes=nodes,
        kinds=kinds,
        order=order,
        commit_start=commit_start,
        slots=arena_slots,
        layout=_layout_of(arena_slots),
        host_slots=host_slots,
        host_layout=_layout_of(host_slots),
    )


def _layout_of(slots):
    return layout(sizes=[s.nbytes for s in slots], ranges=[(s.first, s.last) for s in slots])


def pool_bytes_needed(plan, device, joined):
    """The pool's allocated bytes once `plan` is placed: what is allocated now, with the graph
    arena grown to hold it (the arena is shared: it only ever grows). `joined`: whether the
    step planned is in the arena now (its own old layout then does not count)."""
    arena = device.graph_arena
    others = 0 if joined else arena.size
    allocated = device.pool.stats()["allocated_bytes.current"]
    return allocated - arena.size + max(others, plan.layout.arena_bytes)


def choose_offload(recorded, recorded_kinds, device, sequential, recompute, budget, joined):
    """vDNN's dynamic policy: the first of "none", "conv", "all" (fastest first: the fewer
    copies, the fewer stalls) whose plan fits `budget` bytes of pool; None if none fits.
    The arguments are make_plan's and pool_bytes_needed's."""
    for policy in ("none", "conv", "all"):
        planned = make_plan(recorded, recorded_kinds, device, sequential, recompute, policy)
        if pool_bytes_needed(planned, device, joined) <= budget:
            return policy
    return None
