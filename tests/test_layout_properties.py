"""Property tests for the static arena layout (nnmem/memory/layout.py), against models simple
enough to be obviously right, and then on real compiled steps.

The layout's contract, over any sizes and live ranges:
  * no two slots live at the same position overlap in memory;
  * every slot lies inside the arena: 0 <= offset and offset + size <= arena_bytes, and the
    arena is exactly as high as the highest slot;
  * lower_bound is the most bytes live at any one position, and the arena is at least that
    (and at most the sum of the sizes: no layout needs more than one place per slot);
  * offsets of slots whose sizes are multiples of the alignment are multiples too;
  * the same input gives the same layout;
and check_layout raises exactly when two slots live together overlap.

The same contract holds for the simulated allocator's layouts (past GREEDY_LIMIT slots), checked
on small inputs by lowering the limit. On compiled steps, the blocks' own uses decide: two
blocks used at the same position never share a byte unless an operation writes one over the
other in place there (nnmem/graph/liveness.py's in-place rule).
tests/test_property_mutants.py checks that these tests catch a broken layout.
"""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from property_counts import count

from nnmem import device, opt, tensor
from nnmem.graph.liveness import HOST, INTERMEDIATE
from nnmem.memory import layout as layout_module
from nnmem.memory.layout import check_layout, layout, lower_bound
from nnmem.memory.pool import ALIGNMENT
from nnmem.memory.units import aligned_size
from nnmem.models import create_model

pytestmark = pytest.mark.properties

A = ALIGNMENT


@st.composite
def slots(draw, aligned=True, most=40):
    """(sizes, ranges) of up to `most` slots over up to 40 positions; sizes multiples of the
    alignment (as compiled steps' are) or, with aligned=False, any byte count, 0 included."""
    steps = draw(st.integers(1, 40), label="positions")
    n = draw(st.integers(0, most), label="slots")
    size = st.integers(1, 64).map(lambda k: k * A) if aligned else st.integers(0, 64 * A)
    sizes, ranges = [], []
    for _ in range(n):
        first = draw(st.integers(0, steps - 1))
        last = draw(st.integers(first, steps - 1))
        sizes.append(draw(size))
        ranges.append((first, last))
    return sizes, ranges


def live_together(a, b):
    """Do live ranges a and b (inclusive (first, last) positions) share a position?"""
    return a[0] <= b[1] and b[0] <= a[1]


def share_bytes(offset_a, size_a, offset_b, size_b):
    return offset_a < offset_b + size_b and offset_b < offset_a + size_a


def clashes(sizes, ranges, offsets):
    """Every pair of slots live at the same position that overlaps in memory (all pairs
    compared: the model check_layout's sorted sweep must agree with)."""
    n = len(sizes)
    return [
        (i, j)
        for i in range(n)
        for j in range(i + 1, n)
        if live_together(ranges[i], ranges[j])
        and share_bytes(offsets[i], sizes[i], offsets[j], sizes[j])
    ]


def peak_of_live_bytes(sizes, ranges):
    """The lower bound by its definition: live bytes summed at every position, the largest."""
    positions = {p for first, last in ranges for p in range(first, last + 1)}
    return max(
        (sum(s for s, (f, last) in zip(sizes, ranges) if f <= p <= last) for p in positions),
        default=0,
    )


def check_the_layout(sizes, ranges, make_layout=layout):
    """Lay the slots out with `make_layout` (layout() itself, or a broken copy in the mutation
    tests) and check the whole contract (the docstring's list)."""
    count("layouts")
    count("slots laid out", len(sizes))
    result = make_layout(sizes, ranges)
    offsets, arena = result.offsets, result.arena_bytes
    assert len(offsets) == len(sizes)
    assert not clashes(sizes, ranges, offsets), "slots live at one position overlap"
    for i, (offset, size) in enumerate(zip(offsets, sizes)):
        assert 0 <= offset and offset + size <= arena, f"slot {i} lies outside the arena"
    # as high as the highest slot (the simulated allocator's, rounded to the alignment)
    rounded = [aligned_size(s, A) for s in sizes]
    top = max((o + s for o, s in zip(offsets, sizes)), default=0)
    assert top <= arena <= max((o + s for o, s in zip(offsets, rounded)), default=0), (
        "the arena is higher than its highest slot"
    )
    assert result.lower_bound == lower_bound(sizes, ranges) == peak_of_live_bytes(sizes, ranges)
    assert result.lower_bound <= arena <= sum(rounded)
    if all(s % A == 0 for s in sizes):
        assert all(o % A == 0 for o in offsets), "an aligned slot at an unaligned offset"
    assert make_layout(sizes, ranges) == result, "not deterministic"


def check_the_checker(sizes, ranges, offsets, check=check_layout):
    """`check` (check_layout, or a broken copy) raises exactly when the all-pairs model finds
    two slots live together that overlap."""
    count("layouts")
    expected = clashes(sizes, ranges, offsets)
    try:
        check(sizes, ranges, offsets)
    except AssertionError:
        assert expected, "check_layout saw a clash where there is none"
    else:
        assert not expected, f"check_layout missed the clash of slots {expected[0]}"


def offsets_for(sizes):
    """Random offsets for slots of `sizes`: mostly clashing ones."""
    return st.lists(
        st.integers(0, 8).map(lambda k: k * A), min_size=len(sizes), max_size=len(sizes)
    )


@given(slots())
def test_a_layout_keeps_live_slots_apart_inside_the_arena(case):
    check_the_layout(*case)


@given(slots(aligned=False))
def test_slots_of_any_size_too(case):
    check_the_layout(*case)


@given(slots(), st.data())
def test_check_layout_raises_exactly_on_a_clash(case, data):
    """Offsets drawn at random (mostly clashing) and the layout's own (never): check_layout
    agrees with the all-pairs model on both."""
    sizes, ranges = case
    check_the_checker(sizes, ranges, layout(sizes, ranges).offsets)
    check_the_checker(sizes, ranges, data.draw(offsets_for(sizes), label="offsets"))


@given(slots() | slots(aligned=False))
@example(([300, 300, 300], [(0, 0)] * 3))  # the pool rounds each to 512 bytes: 1,536 in all
def test_the_simulated_allocator_keeps_the_same_contract(case):
    """Past GREEDY_LIMIT slots layout() simulates the pool instead; a limit of 0 sends every
    input there. Its pool must hold every slot at once, rounded up to the alignment (it was
    sized to the unrounded sum, and raised OutOfMemory on sizes that are not multiples)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(layout_module, "GREEDY_LIMIT", 0)
        check_the_layout(*case)


# -- real compiled steps ---------------------------------------------------------------------

MODELS = {  # small enough to plan in a second: (kwargs, input shape)
    "mlp": ({}, (4, 1, 28, 28)),
    "cnn": ({}, (4, 1, 28, 28)),
    "resnet": ({"depth": 8}, (2, 3, 32, 32)),
}


def compiled_step(name):
    """`name`'s training step, recorded and compiled on a planning device (no bytes, no
    kernels: offsets only), and that device."""
    kwargs, shape = MODELS[name]
    model = create_model(name, **kwargs)
    dev = device.create_planning_device()
    model.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx = tensor.PlaceHolder(shape, dev)
    ty = tensor.PlaceHolder((shape[0],), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True)
    tx.set_value(0)  # written, so that the step may read them
    ty.set_value(0)
    model(tx, ty)  # records and compiles; runs nothing
    return model.compiled_step(tx, ty), dev


def uses(plan, kind):
    """{id(block): (block, first, last)}: the positions where each block of `kind` is read or
    written, from the nodes themselves (not from the plan's slots)."""
    spans = {}
    for position, i in enumerate(plan.order):
        for block in plan.nodes[i].blocks():
            if plan.kinds[id(block)] == kind:
                _, first, _ = spans.get(id(block), (block, position, position))
                spans[id(block)] = (block, first, position)
    return spans


def check_placed_plan(plan, kind, arena, pool):
    """The blocks of `kind` (intermediates, or host copies) as the step placed them in `arena`:
    inside the arena's pool block, and never sharing a byte with another block in use at the
    same position, unless that position's operation writes one over the other in place."""
    spans = uses(plan, kind)
    layout_ = plan.layout if kind == INTERMEDIATE else plan.host_layout
    if not spans:
        return
    base = arena.offset
    assert layout_.arena_bytes <= pool.size_of(base), "the arena's pool block is too small"
    for block, _, _ in spans.values():
        assert block.arena_offset == base, f"{block} is not placed in the arena"
        assert base <= block.offset and block.offset + block.nbytes <= base + layout_.arena_bytes, (
            f"{block} lies outside the arena"
        )
    in_place = {
        (position, id(out), id(inp))
        for position, i in enumerate(plan.order)
        for out, inp in plan.nodes[i].inplace
    }
    spans = sorted(spans.values(), key=lambda s: s[0].offset)
    for n, (a, a_first, a_last) in enumerate(spans):
        for b, b_first, b_last in spans[n + 1 :]:
            if b.offset >= a.offset + a.nbytes:
                break  # sorted by offset: no later block reaches back into a
            if not live_together((a_first, a_last), (b_first, b_last)):
                continue
            meet = max(a_first, b_first)
            written_over = {(meet, id(a), id(b)), (meet, id(b), id(a))} & in_place
            assert min(a_last, b_last) == meet and written_over, (
                f"{a} and {b} are both in use at position {meet} and share bytes"
            )


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiled_steps_place_their_blocks_apart(name):
    """Every technique a step can be planned with (recycling on and off, each recompute and
    offload policy, both orders), placed in the planning device's arenas."""
    step, dev = compiled_step(name)
    for recycle in (True, False):
        for recompute in ("speed", "memory", "cost-aware"):
            for offload in ("none", "all", "conv"):
                for sequential in (True, False):
                    with dev.recycling(recycle):
                        step.replan(sequential, recompute, offload)
                    plan = step.plan
                    count("compiled plans")
                    sizes = [s.nbytes for s in plan.slots]
                    ranges = [(s.first, s.last) for s in plan.slots]
                    assert not clashes(sizes, ranges, plan.layout.offsets)
                    assert plan.layout.lower_bound <= plan.layout.arena_bytes
                    check_placed_plan(plan, INTERMEDIATE, dev.graph_arena, dev.pool)
                    check_placed_plan(plan, HOST, dev.host.graph_arena, dev.host.pool)
