"""Offloading as a graph rewrite (vDNN, SuperNeurons' Unified Tensor Pool): activations that
backward reads spend the middle of the step in host memory.

An offloaded tensor B gets two transfer nodes, both on the copy stream:
- a *copy-out*, right after B's last forward writer: B -> a host block H;
- a *prefetch*, in backward: H -> a new device block S (a shadow), which every backward
  reader (and every recomputation) reads instead of B.
B's device bytes then live from its producer to max(its last forward use, the copy-out), and
S's from the prefetch to its last backward use: the static plan sees both ranges, so the
planned peak really drops. H lives in the host pool from the copy-out to the prefetch.

Which tensors (vDNN's static policies):
- "all":  every tensor forward makes and backward reads (each layer's input X, and what else
          a layer keeps for backward: a pooling's argmax, a BatchNorm's statistics);
- "conv": only those that a CONV layer reads as its input X (vDNN: convolutions are slow
          enough to hide their input's transfer).
("dyn", vDNN's dynamic policy, tries these in turn: see nnmem/graph/plan.py:choose_offload.)

When to prefetch (vDNN's findPrefetchLayer): at the start of each backward layer, prefetch
the offloaded tensor needed soonest after this layer, searching no further than the next CONV
layer of backward (the previous one of forward); a tensor that no layer prefetched is fetched
at the start of the layer that reads it.

The rewrite copies values and changes no kernel: losses are identical with offloading on or
off. In-place pairs that would write over an offloaded tensor in forward are dropped, so that
no kernel has to wait for a copy-out to finish before it can write.
"""

import bisect

from nnmem.graph.liveness import INTERMEDIATE
from nnmem.graph.recorder import ArraySpec, Node
from nnmem.graph.rewrite import renumbered, shadow, through

POLICIES = ("none", "conv", "all", "dyn")

MARKER = "marker"  # the stream of a node that only marks a point of the plan (no call)
BACKWARD = ("backward", "recompute")  # the phases that read what forward kept
CONV = "Conv2d"  # the operator name of a CONV layer's node (layer:Conv2d)


def layer_of(node):
    """The layer a node belongs to: its name up to the colon ("conv1" in "conv1:Conv2d")."""
    return node.name.split(":")[0]


def is_conv(node):
    return node.name.split(" ")[0].endswith(":" + CONV)


class Transfer:
    """What a transfer node does: copy `block`'s values between device and host memory.
    ``direction`` is "out" (device -> host, a copy-out) or "in" (host -> device, a prefetch).
    It is a description, not a kernel: the executor's engine queues the copy on the copy
    stream (engine.py)."""

    __slots__ = ("direction", "desc", "nbytes")

    def __init__(self, direction, desc, nbytes):
        self.direction, self.desc, self.nbytes = direction, desc, nbytes

    def __repr__(self):
        return f"<Transfer {self.direction} {self.desc}>"


def offload_candidates(nodes, kinds, policy):
    """Ids of the blocks `policy` offloads, in forward order of their producers."""
    if policy not in ("conv", "all"):
        raise ValueError(f"offload={policy!r}: choose one of {POLICIES}")
    forward_written, later_read, later_written, conv_inputs = {}, set(), set(), set()
    for node in nodes:
        if node.phase == "forward":
            for spec in node.writes:
                forward_written.setdefault(id(spec.block), node.index)
            if is_conv(node):
                conv_inputs.update(id(s.block) for s in node.reads)
        else:
            if node.phase in BACKWARD:
                later_read.update(id(s.block) for s in node.reads)
            later_written.update(id(s.block) for s in node.writes)
    chosen = [
        key
        for key in forward_written
        if kinds.get(key) == INTERMEDIATE
        and key in later_read
        and key not in later_written
        and (policy == "all" or key in conv_inputs)
    ]
    return sorted(chosen, key=forward_written.get)


def gradient_candidates(nodes, kinds):
    """Ids of the blocks backward makes and only the commit phase reads (the weight gradients
    the two-phase step holds until the commit), in backward order of their last writers, but
    not those the last backward layer makes: they are prefetched at its start (add_offload),
    before it would have made them."""
    last_layer = [layer_of(n) for n in nodes if n.phase in BACKWARD][-1:]
    written, read_early, read_late = {}, set(), set()
    for node in nodes:
        for spec in node.reads:
            (read_late if node.phase == "update" else read_early).add(id(spec.block))
        if node.phase == "backward" and [layer_of(node)] != last_layer:
            for spec in node.writes:
                written[id(spec.block)] = node.index
        else:
            for spec in node.writes:
                written.pop(id(spec.block), None)
    chosen = [
        key
        for key in written
        if kinds.get(key) == INTERMEDIATE and key in read_late and key not in read_early
    ]
    return sorted(chosen, key=written.get)


def add_offload(nodes, kinds, policy, host_memory, chosen=None, on_demand=frozenset()):
    """(new nodes, number of offloaded tensors): `nodes` with a copy-out and a prefetch for
    every tensor `policy` offloads ("none" returns the nodes as they are).

    `chosen`: instead of a policy, the ids of the blocks to offload, as the optimal planner
    decides them (graph/optimal.py): activations (offload_candidates(..., "all")) are
    prefetched one backward layer ahead of their first reader's, or those in `on_demand` at
    the start of that layer (prefetch_ahead), and weight
    gradients (gradient_candidates) are copied out after backward made them and prefetched at
    the start of the last backward layer, so that every copy is done before the commit phase
    begins (a failed copy changes no parameter)."""
    if chosen is None:
        if policy == "none":
            return nodes, 0
        chosen = offload_candidates(nodes, kinds, policy)
        schedule = prefetch_schedule
    else:
        chosen = list(chosen)

        def schedule(nodes, keys, first_use):
            return prefetch_ahead(nodes, keys, first_use, on_demand)

    if not chosen:
        return nodes, 0
    blocks = {id(s.block): s.block for n in nodes for s in n.reads + n.writes}
    last_writer, first_use = {}, {}
    for node in nodes:
        if node.phase in ("forward", "backward"):
            for spec in node.writes:
                last_writer[id(spec.block)] = node.index
        if node.phase in BACKWARD:
            for spec in node.reads:
                first_use.setdefault(id(spec.block), node.index)
    gradients = {key for key in chosen if key not in first_use}  # read in the commit only
    activations = [key for key in chosen if key not in gradients]
    prefetch_at = schedule(nodes, activations, first_use) if activations else {}
    if gradients:
        last_start = backward_layers(nodes)[-1]
        prefetch_at.setdefault(last_start, []).extend(k for k in chosen if k in gradients)

    host = {
        key: host_memory.new_block(blocks[key].nbytes, f"{blocks[key].desc} (on host)")
        for key in chosen
    }
    shadows = {key: shadow(blocks[key], "prefetched") for key in chosen}
    copy_out_after, release_after = {}, {}
    for key in chosen:
        copy_out_after.setdefault(last_writer[key], []).append(key)
    releases = _release_points(nodes, activations, ("forward",))
    releases.update(_release_points(nodes, gradients, ("backward",)))
    for key, index in releases.items():
        release_after.setdefault(index, []).append(key)
    offloaded = set(chosen)

    out, new_index = [], {}
    for node in nodes:
        for key in prefetch_at.get(node.index, ()):  # before this backward layer starts
            block = blocks[key]
            out.append(_transfer_node(len(out), "in", host[key], shadows[key], block, out))
        if node.phase == "forward":
            # no kernel writes over an offloaded tensor while its copy-out may still read it
            inplace = tuple(p for p in node.inplace if id(p[1]) not in offloaded)
            reads = node.reads
        else:
            inplace, reads = node.inplace, through(node.reads, shadows)
        after = tuple(new_index[i] for i in node.after)
        new_index[node.index] = len(out)
        out.append(renumbered(node, len(out), reads=reads, inplace=inplace, after=after))
        for key in copy_out_after.get(node.index, ()):
            out.append(
                _transfer_node(
                    len(out), "out", blocks[key], host[key], blocks[key], out, node.phase
                )
            )
        for key in release_after.get(node.index, ()):
            out.append(_release_node(len(out), blocks[key], node.phase))
    return out, len(chosen)


def _release_points(nodes, chosen, phases):
    """{block id: index of the node after which its device bytes may be reused}: the end of
    the layer (of `phases`: forward for activations, backward for gradients) after the one
    that last uses it there. A copy-out needs time: the layer's compute hides it, where
    reusing the bytes at once would make the next kernel that writes them wait for the copy
    (vDNNExt frees a block when its copy-out event fires; a static plan must say in advance
    where that will be)."""
    last_use, run_of, run_ends = {}, {}, []
    for node in nodes:
        if node.phase not in phases:
            continue
        if not run_ends or layer_of(node) != layer_of(nodes[run_ends[-1]]):
            run_ends.append(node.index)
        run_ends[-1] = node.index
        run_of[node.index] = len(run_ends) - 1
        for spec in node.reads + node.writes:
            last_use[id(spec.block)] = node.index
    return {key: run_ends[min(run_of[last_use[key]] + 1, len(run_ends) - 1)] for key in chosen}


def _release_node(index, block, phase):
    """A node that does nothing but read `block`: the plan keeps the block's bytes until it
    (the replay runs no call for it)."""
    return Node(
        index,
        f"release:{block.desc}",
        None,
        (),
        (ArraySpec(block, (block.nbytes,), "uint8"),),
        (),
        phase,
        None,
        (index - 1,),
        MARKER,
    )


def _transfer_node(index, direction, src, dst, block, emitted, phase="backward"):
    """A copy-stream node copying `src` to `dst` (whole blocks, as bytes), placed after the
    last node emitted so far (a control edge: BFS must not move a prefetch earlier); a
    copy-out is in the phase of the node that made its block."""
    phase = phase if direction == "out" else "backward"
    verb = "offload" if direction == "out" else "prefetch"
    return Node(
        index,
        f"{verb}:{block.desc}",
        Transfer(direction, block.desc, block.nbytes),
        (ArraySpec(dst, (dst.nbytes,), "uint8"),),
        (ArraySpec(src, (src.nbytes,), "uint8"),),
        (),
        phase,
        None,
        (index - 1,) if emitted else (),
        "copy",
    )


def layer_starts(nodes, phases):
    """The index of the first node of each layer of `phases`: maximal runs of consecutive
    nodes of those phases with one layer name (nodes of other phases are skipped, not
    breaks)."""
    starts = []
    for node in nodes:
        if node.phase in phases and (not starts or layer_of(node) != layer_of(nodes[starts[-1]])):
            starts.append(node.index)
    return starts


def backward_layers(nodes):
    """The index of the first node of each backward layer: a run of backward nodes of one
    layer name, with the recomputations that run just before them (a rewrite inserts those
    to rebuild what the layer reads: they must not move the layers a plan was decided on)."""
    starts, waiting, current = [], None, None
    for node in nodes:
        if node.phase == "recompute":
            waiting = node.index if waiting is None else waiting
        elif node.phase == "backward":
            if layer_of(node) != current:
                starts.append(node.index if waiting is None else waiting)
                current = layer_of(node)
            waiting = None
    return starts


def prefetch_ahead(nodes, chosen, first_use, on_demand=frozenset()):
    """{node index: [offloaded block ids to prefetch just before that node]}: each tensor at
    the start of the backward layer before the one that first reads it (at the start of the
    first backward layer if that one reads it), so that its copy overlaps one layer of
    compute; those in `on_demand` at the start of the layer that reads them (less time on the
    device, less compute to hide the copy). The optimal planner's rule (graph/optimal.py):
    unlike vDNN's window (prefetch_schedule) it does not depend on which other tensors are
    offloaded, so a tensor's time on the device is known before the choice is made. Layers:
    backward_layers."""
    starts = backward_layers(nodes)
    schedule = {}
    for key in sorted(chosen, key=lambda k: first_use[k]):
        layer = bisect.bisect_right(starts, first_use[key]) - 1
        lead = 0 if key in on_demand else 1
        schedule.setdefault(starts[max(layer - lead, 0)], []).append(key)
    return schedule


def prefetch_schedule(nodes, chosen, first_use):
    """{node index: [offloaded block ids to prefetch just before that node]}: vDNN's window.

    `nodes`: the step in recording order (each with .index, .name "layer:Op", .phase);
    `chosen`: the offloaded blocks' ids; `first_use`: block id -> index of its first
    backward reader. Backward is cut into layers: maximal runs of consecutive backward (or
    recompute) nodes of one layer name (other phases are skipped, not breaks). Layer k starts
    at its first node, and its window reaches the first layer after k that runs a CONV
    (inclusive), or the last layer if none does. At the start of each layer k, in order:

    1. on demand: every tensor first read in layer k and not yet prefetched;
    2. ahead of time: at most one tensor, the not yet prefetched one read soonest (smallest
       first_use; ties keep `chosen`'s order), if its first reader's layer lies in k's window.

    So each tensor is prefetched exactly once, no later than the start of its first reader's
    layer, and no CONV layer runs strictly between the layer that prefetches it and that one
    (vDNN's findPrefetchLayer: the copy overlaps the layers up to the next CONV, whose compute
    hides it). Keys are layer starts; lists are never empty; within a list, the on-demand
    tensors (by first use) come before the one fetched ahead."""
    starts, layer_at, convs = [], {}, []  # start node of each backward layer; node -> layer
    for node in nodes:
        if node.phase not in BACKWARD:
            continue
        if not starts or layer_of(node) != layer_of(nodes[starts[-1]]):
            starts.append(node.index)
            convs.append(False)
        layer_at[node.index] = len(starts) - 1
        convs[-1] = convs[-1] or is_conv(node)
    # window_end[k]: the first CONV layer after layer k (the last layer if none)
    window_end, next_conv = [0] * len(starts), len(starts) - 1
    for k in range(len(starts) - 1, -1, -1):
        window_end[k] = next_conv
        if convs[k]:
            next_conv = k
    soonest = sorted(chosen, key=lambda key: first_use[key])  # needed soonest first
    due_in = {}  # layer -> tensors it reads first
    for key in soonest:
        due_in.setdefault(layer_at[first_use[key]], []).append(key)
    done, next_up, schedule = set(), 0, {}
    for layer, start in enumerate(starts):
        here = schedule.setdefault(start, [])
        # on demand: what this layer reads and nobody prefetched yet
        for key in due_in.get(layer, ()):
            if key not in done:
                here.append(key)
                done.add(key)
        # ahead of time: the tensor needed soonest after this layer, within the window
        while next_up < len(soonest) and soonest[next_up] in done:
            next_up += 1
        if next_up < len(soonest):
            key = soonest[next_up]
            if layer_at[first_use[key]] <= window_end[layer]:
                here.append(key)
                done.add(key)
    return {start: keys for start, keys in schedule.items() if keys}
