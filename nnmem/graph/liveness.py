"""What each block of a recorded step is, and when it is live.

Kinds (from the first use of the block in the step, and whether anything outside the graph
still refers to it once the step has been recorded):
- input:        first read, never written: data fed from Python (placeholders, constants);
- parameter:    first read, then written in place: weights, BatchNorm statistics, optimizer
                state;
- intermediate: first written, and nothing outside the graph refers to it: activations,
                gradients, workspaces. Only these are recycled and planned;
- end:          first written, and still referred to from Python (returned results, anything
                the user kept): kept, never recycled;
- host:         a block in the device's host memory (an offloaded tensor's copy, offload.py):
                planned like an intermediate, but in the host pool.

A block is live from the position of its first access to the position of its last access in
the replay order: its memory can be recycled right after its last reader (automatic
recycling by reference counts, SINGA). Two blocks whose live ranges do not overlap may share
memory, whatever their shapes (MXNet).

In-place (MXNet): when a node may write its output over an input (an elementwise kernel) and
the node is that input's last reader, the output is merged into the input's slot
(may_write_in_place). Only then: reusing an input that a later node still reads is the in-place
"trap".
"""

INPUT, PARAMETER, INTERMEDIATE, END = "input", "parameter", "intermediate", "end"
HOST = "host"


def block_kinds(nodes):
    """{id(block): kind} for every block the step touches."""
    first_read, written, blocks = {}, set(), {}
    for node in nodes:
        for spec in node.reads:
            first_read.setdefault(id(spec.block), id(spec.block) not in written)
        for spec in node.writes:
            first_read.setdefault(id(spec.block), False)
            written.add(id(spec.block))
        for block in node.blocks():
            blocks[id(block)] = block
    kinds = {}
    for key, block in blocks.items():
        if getattr(block.device, "is_host", False):
            kinds[key] = HOST
        elif first_read[key]:
            kinds[key] = PARAMETER if key in written else INPUT
        else:
            kinds[key] = END if block.ref_count > 0 else INTERMEDIATE
    return kinds, blocks


def may_write_in_place(position, out_range, in_range, out_bytes, in_bytes):
    """May the node at replay `position` write its output over its input's bytes? (MXNet)

    `out_range` and `in_range` are the (first, last) positions at which the output and the
    input are live (inclusive); `out_bytes` is the output's size, `in_bytes` the size of the
    slot that holds the input. True exactly when all four hold:

    - in_range[1] == position:  this node is the input's last reader. If a later node still
      reads the input, writing over it hands that node the output's values: the in-place trap;
    - in_range[0] < position:   the input has its bytes already, from an earlier node (there
      is nothing to take over from a block that is first used here);
    - out_range[0] == position: the output's life starts here, so it needs no bytes before;
    - out_bytes <= in_bytes:    the output fits in the input's slot (equal sizes fit).

    Whether the kernel itself can run in place (an elementwise one can) is the operator's
    call: it lists the (output, input) pairs it allows (Operator.run's `inplace`). This rule
    only says when the memory of such a pair may be shared.
    """
    return (
        in_range[1] == position
        and in_range[0] < position
        and out_range[0] == position
        and out_bytes <= in_bytes
    )


class Slot:
    """Memory for one or more blocks that never need it at the same time (in-place chains).
    `ranges` holds each block's own live range; first..last covers them all."""

    __slots__ = ("blocks", "ranges", "nbytes", "first", "last")

    def __init__(self, block, nbytes, first, last):
        self.blocks, self.ranges = [block], [(first, last)]
        self.nbytes, self.first, self.last = nbytes, first, last

    def __repr__(self):
        span = f"positions {self.first}..{self.last}"
        return f"<Slot {self.nbytes} B, {span}, {len(self.blocks)} blocks>"


def slots(nodes, order, kinds, round_up, inplace=True, recycle=True):
    """The intermediate blocks' slots with their live ranges, in replay positions.

    recycle=False keeps every block from its first use to the end of the step (nothing is
    ever reused: the baseline, as a device with recycling off runs it eagerly: a block takes
    its bytes when first written and gives them back when the step ends).
    """
    first, last = {}, {}
    for position, i in enumerate(order):
        for block in nodes[i].blocks():
            key = id(block)
            if kinds[key] == INTERMEDIATE:
                first.setdefault(key, position)
                last[key] = position
    blocks = {id(b): b for n in nodes for b in n.blocks()}
    slot_of = {}
    result = []
    for position, i in enumerate(order):
        node = nodes[i]
        merged = {}
        if inplace and recycle:
            for out, inp in node.inplace:
                ko, ki = id(out), id(inp)
                if (
                    kinds.get(ko) == INTERMEDIATE
                    and kinds.get(ki) == INTERMEDIATE
                    and ko not in slot_of
                    and ko not in merged
                    and ki in slot_of
                    and ki not in merged.values()
                    and may_write_in_place(
                        position,
                        (first[ko], last[ko]),
                        (first[ki], last[ki]),
                        round_up(out.nbytes),
                        slot_of[ki].nbytes,
                    )
                ):
                    merged[ko] = ki
        for block in node.blocks():
            key = id(block)
            if kinds[key] != INTERMEDIATE or key in slot_of:
                continue
            if key in merged:
                slot = slot_of[merged[key]]
                slot.blocks.append(block)
                slot.ranges.append((first[key], last[key]))
                slot.last = max(slot.last, last[key])
            else:
                slot = Slot(block, round_up(block.nbytes), first[key], last[key])
                result.append(slot)
            slot_of[key] = slot
    if not recycle:  # no in-place merges: one block per slot
        for slot in result:
            slot.last = len(order) - 1
            slot.ranges = [(slot.first, slot.last)]
    assert len(slot_of) == sum(1 for k in blocks if kinds[k] == INTERMEDIATE)
    return result


def live_bytes(step_slots, positions):
    """The bytes of `step_slots` live at each of `positions` positions: a sweep over +nbytes at
    each slot's first position and -nbytes after its last (a slot's bytes count over its
    whole range, in-place chains included)."""
    delta = [0] * (positions + 1)
    for slot in step_slots:
        delta[slot.first] += slot.nbytes
        delta[slot.last + 1] -= slot.nbytes
    live, running = [], 0
    for position in range(positions):
        running += delta[position]
        live.append(running)
    return live
