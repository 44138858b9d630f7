"""Recomputation changes no number, lowers the peak where it can, and cost-aware keeps the
memory-centric peak with fewer recomputations; the route of SuperNeurons' Algorithm 1."""

import numpy as np
import pytest

from nnmem import device, opt, tensor
from nnmem.graph.plan import plan_as_asked
from nnmem.graph.schedule import bfs_order, dependencies, route_order
from nnmem.models import create_model
from nnmem.planning import plan

# tiny members of the zoo: fans and joins (inception, densenet, resnet), dropout (alexnet)
CASES = {
    "cnn": ((4, 1, 28, 28), {}),
    "resnet": ((2, 3, 16, 16), {"depth": 8}),
    "alexnet": ((2, 3, 67, 67), {"width": 1 / 16, "num_classes": 10}),
    "densenet": ((2, 3, 16, 16), {"layers_per_block": 2, "blocks": 2}),
    "inception": ((2, 3, 16, 16), {"width": 0.25}),
}


def run(name, recompute, use_graph=True, sequential=False, steps=3, offload="none"):
    shape, kwargs = CASES[name]
    dev = device.create_cpu_device("128MiB")
    dev.SetRandSeed(0)
    m = create_model(name, **kwargs)
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx, ty = tensor.PlaceHolder(shape, dev), tensor.PlaceHolder((shape[0],), dev, tensor.int32)
    m.compile(
        [tx], use_graph=use_graph, sequential=sequential, recompute=recompute, offload=offload
    )
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        tx.copy_from_numpy(rng.random(shape, dtype=np.float32))
        ty.copy_from_numpy(rng.integers(0, 10, shape[0]).astype(np.int32))
        losses.append(tensor.to_numpy(m(tx, ty)[1])[0])
    states = {k: tensor.to_numpy(v) for k, v in m.get_states().items()}
    return losses, states, m.compiled_step(tx, ty) if use_graph else None


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_policy_changes_no_number(name):
    eager = run(name, "none", use_graph=False)
    steps = {}
    for policy in ("speed", "memory", "cost-aware"):
        for sequential in (True, False):
            losses, states, steps[policy] = run(name, policy, sequential=sequential)
            assert losses == eager[0], (policy, sequential)
            for k in states:
                np.testing.assert_array_equal(states[k], eager[1][k], err_msg=f"{policy} {k}")
    assert steps["speed"].recomputations > 0 and steps["memory"].recomputations > 0
    # cost-aware recomputes, or drops recomputation where it would raise the peak
    plain = run(name, "none")[2].memory_summary()["arena_bytes"]
    cost = steps["cost-aware"]
    assert cost.recomputations > 0 or cost.memory_summary()["arena_bytes"] == plain


def test_cost_aware_drops_a_recomputation_that_would_raise_the_peak():
    # offloading every activation moves the peak away from the tensors recomputation drops:
    # keeping what rebuilds them then only adds bytes
    _, _, step = run("cnn", "cost-aware", offload="all")
    assert step.recompute_policy == "cost-aware" and step.recomputations == 0
    asked = plan_as_asked(
        step.recorded, step.recorded_kinds, step.device, False, "cost-aware", "all"
    )
    raised = asked.layout.arena_bytes
    assert raised > step.layout.arena_bytes


@pytest.mark.parametrize("name", ["cnn", "alexnet", "inception"])
def test_memory_centric_rebuilds_for_one_operation_at_a_time_in_any_order(name):
    """Memory-centric rebuilds what each backward operation needs and drops it after that
    operation: in any replay order (BFS too, which starts every node as soon as it may), the
    tensors rebuilt for two different operations are never live at the same time."""
    _, _, step = run(name, "memory", steps=1)
    for sequential in (True, False):
        step.replan(sequential)
        position = {i: p for p, i in enumerate(step.order)}
        # the rewrite puts the rebuilds an operation needs right before it: their consumer
        consumer, waiting = {}, []
        for node in step.nodes:
            if node.phase == "recompute":
                waiting += [id(s.block) for s in node.writes]
            else:
                consumer.update((key, node.index) for key in waiting)
                waiting = []
        rebuilt = set(consumer)
        span = {}
        for i in step.order:
            for block in step.nodes[i].blocks():
                if id(block) in rebuilt:
                    first, _ = span.get(id(block), (position[i], None))
                    span[id(block)] = (first, position[i])
        assert rebuilt
        for a in rebuilt:
            for b in rebuilt:
                if consumer[a] != consumer[b]:
                    assert span[a][1] < span[b][0] or span[b][1] < span[a][0], (sequential, a, b)


def test_memory_centric_needs_no_more_than_speed_centric():
    def lower_bound(policy, sequential):
        _, _, step = run("cnn", policy, sequential=sequential, steps=1)
        return step.layout.lower_bound

    for sequential in (True, False):
        assert lower_bound("memory", sequential) < lower_bound("speed", sequential), sequential


def test_recomputation_lowers_the_resnet_peak_and_cost_aware_is_in_between():
    def summary(policy):
        return plan(create_model("resnet", depth=20), (32, 3, 32, 32), recompute=policy).techniques[
            2
        ]

    speed, memory, cost = summary("speed"), summary("memory"), summary("cost-aware")
    liveness = plan(create_model("resnet", depth=20), (32, 3, 32, 32)).techniques[1]
    assert memory.lower_bound_bytes < liveness.lower_bound_bytes
    assert cost.lower_bound_bytes <= memory.lower_bound_bytes  # reaches the memory-centric peak
    assert speed.recomputations <= cost.recomputations < memory.recomputations


def test_compile_rejects_recompute_without_graph_or_unknown_policies():
    m = create_model("mlp")
    tx = tensor.PlaceHolder((2, 1, 8, 8), device.create_cpu_device("1MiB"))
    with pytest.raises(ValueError, match="use_graph=True"):
        m.compile([tx], use_graph=False, recompute="speed")
    with pytest.raises(ValueError, match="cost-aware"):
        m.compile([tx], use_graph=True, recompute="sometimes")


def test_route_is_depth_first_and_waits_at_joins():
    _, _, step = run("inception", "none", steps=1)
    nodes = step.nodes
    predecessors = dependencies(nodes)
    for order in (route_order(nodes, predecessors), bfs_order(nodes, predecessors)):
        position = {i: p for p, i in enumerate(order)}
        assert sorted(order) == list(range(len(nodes)))
        assert all(
            position[j] < position[i] for i, before in enumerate(predecessors) for j in before
        )
    route = [nodes[i].name for i in route_order(nodes, predecessors) if nodes[i].phase == "forward"]
    branch = [n for n in route if n.startswith("module1.branch3")]
    first = route.index(branch[0])
    assert route[first : first + len(branch)] == branch  # a whole branch before the next one


def test_live_sets_free_each_tensor_after_its_last_use():
    _, _, step = run("cnn", "none", steps=1)
    sets = step.live_sets()
    assert len(sets) == len(step.nodes)
    for (_, before, after), (_, next_before, _) in zip(sets, sets[1:]):
        assert after == next_before
    last_use = {}
    for position, i in enumerate(step.order):
        for block in step.nodes[i].blocks():
            last_use[block.desc] = position
    for position, (_, _, after) in enumerate(sets):
        for desc in after:
            assert last_use[desc] > position, f"{desc} kept after its last use"
