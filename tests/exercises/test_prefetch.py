"""Exercise 6 (tutorial 05): vDNN's prefetch window, nnmem/graph/offload.py:prefetch_schedule.

At the start of each backward layer: first, on demand, every offloaded tensor that layer reads
first and nobody prefetched; then, ahead of time, at most one more, the one read soonest, if
no CONV layer runs between this layer and its reader's (exercises/05_prefetch.md). The tests
build backward passes by hand, compare random ones with a second, plainer account of the
rule, and check the prefetches of an offloaded ResNet's plan."""

from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st
from training import planned_step

from nnmem.graph.offload import prefetch_schedule

pytestmark = pytest.mark.exercise_prefetch


class FakeNode(NamedTuple):
    index: int
    name: str
    phase: str


class Step(NamedTuple):
    nodes: list
    starts: list  # index of each backward layer's first node
    readers: dict  # tensor -> index of its first reader


def build(layers, reads, forward=2, nodes_per_layer=2):
    """A step: `forward` forward nodes, then one backward layer per entry of `layers`
    ("conv" or any other operator name), `nodes_per_layer` nodes each. `reads`: tensor ->
    (layer, node within it) of its first backward reader."""
    nodes = [FakeNode(i, f"f{i}:Dense", "forward") for i in range(forward)]
    starts = []
    for k, kind in enumerate(layers):
        op = "Conv2d" if kind == "conv" else kind
        starts.append(len(nodes))
        for _ in range(nodes_per_layer):
            nodes.append(FakeNode(len(nodes), f"layer{k}:{op}", "backward"))
    readers = {key: starts[k] + j for key, (k, j) in reads.items()}
    return Step(nodes, starts, readers)


def schedule(step, chosen=None):
    chosen = list(step.readers) if chosen is None else chosen
    return prefetch_schedule(step.nodes, chosen, step.readers)


# -- hand-made backward passes --------------------------------------------------------------


def test_vdnn_one_ahead_within_the_window():
    # layers 0..5, CONV at 2 and 4; a is read first in layer 1, b in 2, c in 4, d in 5
    step = build(["Dense", "ReLU", "conv", "ReLU", "conv", "Dense"], {
        "a": (1, 0), "b": (2, 1), "c": (4, 0), "d": (5, 1),
    })  # fmt: skip
    s = step.starts
    # layer 3 may not fetch d: the CONV of layer 4 runs before layer 5 reads it
    assert schedule(step) == {s[0]: ["a"], s[1]: ["b"], s[2]: ["c"], s[4]: ["d"]}


def test_a_tensor_the_first_layer_reads_is_fetched_on_demand_there():
    step = build(["Dense", "Dense"], {"a": (0, 1), "b": (1, 0)})
    assert schedule(step) == {step.starts[0]: ["a", "b"]}  # a on demand, then b ahead


def test_on_demand_first_then_one_ahead_in_order_of_first_use():
    step = build(["Dense", "Dense", "Dense", "Dense"], {
        "late": (3, 0), "x": (1, 1), "y": (1, 0), "z": (2, 0),
    })  # fmt: skip
    s = step.starts
    # layer 0 fetches y ahead (read at (1, 0), before x); layer 1 needs x on demand, then z
    assert schedule(step) == {s[0]: ["y"], s[1]: ["x", "z"], s[2]: ["late"]}


def test_ties_in_first_use_keep_the_order_of_chosen():
    step = build(["Dense", "Dense"], {"p": (1, 0), "q": (1, 0)})
    assert schedule(step, ["q", "p"]) == {step.starts[0]: ["q"], step.starts[1]: ["p"]}
    assert schedule(step, ["p", "q"]) == {step.starts[0]: ["p"], step.starts[1]: ["q"]}


def test_the_window_ends_at_the_next_conv_layer_inclusive():
    step = build(["Dense", "conv", "Dense", "Dense"], {"at_conv": (1, 0), "after": (3, 0)})
    s = step.starts
    assert schedule(step) == {s[0]: ["at_conv"], s[1]: ["after"]}
    step = build(["Dense", "conv", "Dense"], {"after_conv": (2, 0)})
    assert schedule(step) == {step.starts[1]: ["after_conv"]}  # not from layer 0


def test_a_conv_layer_s_own_window_reaches_the_next_conv():
    step = build(["conv", "Dense", "conv", "Dense"], {"a": (2, 0), "b": (3, 1)})
    s = step.starts
    assert schedule(step) == {s[0]: ["a"], s[2]: ["b"]}


def test_without_a_conv_ahead_the_window_is_the_rest_of_backward():
    step = build(["Dense"] * 6, {"far": (5, 0)})
    assert schedule(step) == {step.starts[0]: ["far"]}


def test_nothing_offloaded_nothing_prefetched():
    step = build(["Dense", "conv"], {})
    assert schedule(step) == {}


def test_layers_are_runs_of_backward_nodes_other_phases_are_skipped():
    nodes = [
        FakeNode(0, "fc:Dense", "forward"),
        FakeNode(1, "fc:Dense", "backward"),  # layer 0 starts here
        FakeNode(2, "sgd:update", "update"),  # not backward: skipped, not a break
        FakeNode(3, "fc:Dense", "backward"),  # still layer 0
        FakeNode(4, "conv:Conv2d", "recompute"),  # layer 1: recompute counts as backward
        FakeNode(5, "conv:Conv2d", "backward"),
        FakeNode(6, "fc:Dense", "backward"),  # layer 2: the same name again, a new run
        FakeNode(7, "fc:Dense", "backward"),  # layer 2
    ]
    readers = {"a": 3, "b": 5, "c": 7}
    # layer 0: a on demand (read at 3, in layer 0), b ahead; layer 1: c ahead (the window of
    # layer 1 runs to its end: no CONV after it)
    assert prefetch_schedule(nodes, ["a", "b", "c"], readers) == {1: ["a", "b"], 4: ["c"]}


def test_a_conv_in_the_middle_of_a_layer_makes_it_a_conv_layer():
    nodes = [
        FakeNode(0, "x:Dense", "forward"),
        FakeNode(1, "a:Dense", "backward"),
        FakeNode(2, "b:AddBias", "backward"),
        FakeNode(3, "b:Conv2d", "backward"),
        FakeNode(4, "b:Conv2d", "backward"),
        FakeNode(5, "c:Dense", "backward"),
    ]
    # layer b (nodes 2-4) runs a CONV: layer a may fetch what b reads, not what c reads
    assert prefetch_schedule(nodes, ["t"], {"t": 4}) == {1: ["t"]}
    assert prefetch_schedule(nodes, ["t"], {"t": 5}) == {2: ["t"]}


# -- random backward passes against a plainer account of the rule ---------------------------


def plain_rule(step, layers, chosen):
    """Layer by layer: what the layer reads first and nobody fetched, then the pending tensor
    read soonest if no CONV layer lies strictly between this layer and its reader's."""
    layer_of = {}
    for k, start in enumerate(step.starts):
        end = step.starts[k + 1] if k + 1 < len(step.starts) else len(step.nodes)
        layer_of.update({i: k for i in range(start, end)})
    pending = sorted(chosen, key=lambda key: step.readers[key])
    result = {}
    for k, start in enumerate(step.starts):
        here = [key for key in pending if layer_of[step.readers[key]] == k]
        pending = [key for key in pending if key not in here]
        if pending:
            key, reader_layer = pending[0], layer_of[step.readers[pending[0]]]
            if not any(layers[j] == "conv" for j in range(k + 1, reader_layer)):
                here.append(key)
                pending.pop(0)
        if here:
            result[start] = here
    return result


@st.composite
def backward_passes(draw):
    layers = draw(st.lists(st.sampled_from(["conv", "Dense", "ReLU"]), min_size=1, max_size=10))
    n = draw(st.integers(0, 12))
    reads = {
        f"t{i}": (draw(st.integers(0, len(layers) - 1)), draw(st.integers(0, 1))) for i in range(n)
    }
    step = build(layers, reads, forward=draw(st.integers(0, 3)))
    chosen = draw(st.permutations(sorted(reads)))
    return step, layers, chosen


@given(backward_passes())
def test_random_backward_passes_follow_the_rule(case):
    step, layers, chosen = case
    result = prefetch_schedule(step.nodes, list(chosen), step.readers)
    assert result == plain_rule(step, layers, chosen)


@given(backward_passes())
def test_each_tensor_once_at_a_layer_start_before_its_reader(case):
    step, _, chosen = case
    result = prefetch_schedule(step.nodes, list(chosen), step.readers)
    fetched = [key for keys in result.values() for key in keys]
    assert sorted(fetched) == sorted(chosen)
    assert all(keys for keys in result.values())
    for start, keys in result.items():
        assert start in step.starts
        assert all(start <= step.readers[key] for key in keys)


# -- an offloaded ResNet's plan -------------------------------------------------------------


def planned_resnet(offload):
    return planned_step("resnet", (4, 3, 16, 16), {"depth": 8}, offload=offload)


def test_the_prefetches_of_an_offloaded_resnet():
    step = planned_resnet("all")
    nodes = step.nodes
    prefetches = [n for n in nodes if n.name.startswith("prefetch:")]
    assert len(prefetches) == step.offloaded > 0
    layer, names = {}, []  # index of each backward compute node -> the number of its layer
    for n in nodes:
        if n.stream == "compute" and n.phase in ("backward", "recompute"):
            name = n.name.split(":")[0]
            if not names or names[-1] != name:
                names.append(name)
            layer[n.index] = len(names) - 1
    conv_layers = {layer[n.index] for n in nodes if n.index in layer and ":Conv2d" in n.name}
    ahead = {}
    for p in prefetches:
        shadow = p.writes[0].block
        reader = min(n.index for n in nodes if any(s.block is shadow for s in n.reads))
        starts = min(i for i in layer if i > p.index)  # the layer it is issued before
        assert p.index < reader
        k, r = layer[starts], layer[reader]
        assert k <= r
        assert not conv_layers & set(range(k + 1, r)), f"{p.name}: beyond the next CONV"
        if r > k:
            ahead[k] = ahead.get(k, 0) + 1
    assert ahead and max(ahead.values()) == 1, "one tensor ahead of time per layer at most"
    assert step.layout.arena_bytes < planned_resnet("none").layout.arena_bytes
