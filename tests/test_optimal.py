"""memory="optimal": keep, recompute or offload per tensor, fastest within a budget
(graph/optimal.py, its MILP in graph/milp.py, its cost model in graph/costs.py)."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_offload import failing_copies
from training import assert_identical, batches, train

from nnmem import device, opt, planning, tensor
from nnmem.graph import milp, optimal
from nnmem.graph.costs import CostModel, plan_seconds
from nnmem.graph.offload import gradient_candidates
from nnmem.graph.optimal import NoPlanFits, OptimalPlanner
from nnmem.graph.plan import pool_bytes_needed
from nnmem.memory import TransferError
from nnmem.models import create_model


def resnet():
    return create_model("resnet", depth=8)  # joins and fans


DATA = batches((8, 3, 32, 32), 3)


@pytest.fixture(scope="module")
def reference():
    """ResNet-8 trained with no technique, and its liveness peak and smallest optimal pool."""
    result = train(resnet(), DATA, use_graph=True)
    # the smallest workspaces, as compile's last try records them (step_cache.WORKSPACE_LIMITS),
    # on a CPU device like train's (a planning device's pool holds a few bytes less)
    dev = device.create_cpu_device("256MiB")
    planner, _ = recorded_planner(resnet(), (8, 3, 32, 32), dev=dev, workspace_limit=0)
    _, smallest, proven = planner.smallest()
    liveness = pool_bytes_needed(planner.liveness, planner.device, joined=True)
    return result, liveness, smallest, proven


def recorded_planner(model, shape, costs=None, dev=None, workspace_limit=None):
    """(OptimalPlanner, step) of `model`'s training step recorded on `dev` (a planning
    device by default), its convolutions' workspaces capped at `workspace_limit` bytes."""
    dev = dev or device.create_planning_device()
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    tx = tensor.PlaceHolder(shape, dev)
    ty = tensor.PlaceHolder((shape[0],), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True)
    tx.set_value(0)
    ty.set_value(0)
    with dev.limit_workspaces(workspace_limit):
        model(tx, ty)
    step = model.compiled_step(tx, ty)
    planner = OptimalPlanner(*step.recording(optimal=True), dev, False, True, costs)
    return planner, step


@pytest.mark.parametrize("share", [1.0, 0.75, 0.5, 0.0])
def test_every_budget_trains_bit_for_bit_and_within_it(reference, share):
    """The losses and final states of the step with no technique, at every budget down to the
    smallest; the pool's measured peak is the planned one, within the budget."""
    result, liveness, smallest, _ = reference
    budget = int(smallest + share * (liveness - smallest))
    optimal_run = train(resnet(), DATA, use_graph=True, memory="optimal", budget=budget)
    assert_identical(result, optimal_run)
    dev, tx, ty = optimal_run[2:]
    m_step = dev.memory_stats()
    assert m_step["high_water_bytes"] <= budget
    # the plan said what the pool would hold; the pool held exactly that (the optimizer state
    # exists from the first step on, so every step measures the same)
    assert m_step["allocated_bytes.peak"] == m_step["high_water_bytes"]


def test_the_smallest_plan_offloads_gradients_and_a_failed_copy_changes_nothing(reference):
    _, _, smallest, _ = reference
    m = resnet()
    dev = device.create_cpu_device("256MiB")
    _, states, _, tx, ty = train(m, DATA[:1], True, dev=dev, memory="optimal", budget=smallest)
    step = m.compiled_step(tx, ty)
    # the smallest plan parks weight gradients in host memory until the last backward layer
    gradients = set(gradient_candidates(step.recorded, step.recorded_kinds))
    assert gradients & set(step.optimal.decisions.offload)
    calls = []
    failing_copies(dev, 2 * len(step.optimal.decisions.offload), calls)  # the step's last
    tx.copy_from_numpy(DATA[1][0])
    ty.copy_from_numpy(DATA[1][1])
    with pytest.raises(TransferError, match="injected"):
        m(tx, ty)
    for name, value in m.get_states().items():
        np.testing.assert_array_equal(tensor.to_numpy(value), states[name], err_msg=name)


def test_memory_decisions_explain_every_tensor(reference):
    _, liveness, smallest, _ = reference
    m = resnet()
    _, _, dev, tx, ty = train(
        m, DATA[:1], True, memory="optimal", budget=(liveness + smallest) // 2
    )
    step = m.compiled_step(tx, ty)
    rows = step.memory_decisions()
    decided = step.optimal.decisions
    assert sum(r["decision"] == "recompute" for r in rows) == len(decided.recompute)
    assert sum(r["decision"].startswith("offload") for r in rows) == len(decided.offload)
    for row in rows:
        assert row["bytes"] > 0 and row["seconds"] >= 0
        if step.optimal.source == "solver":  # (a heuristic's plan: where is the policy's)
            assert bool(row["off_device"]) == (row["decision"] != "keep")
    heuristic = resnet()
    _, _, _, hx, hy = train(heuristic, DATA[:1], True)
    with pytest.raises(ValueError, match="memory='optimal'"):
        heuristic.compiled_step(hx, hy).memory_decisions()


def test_an_infeasible_budget_names_the_smallest_that_fits(reference):
    _, _, smallest, proven = reference
    assert proven <= smallest
    with pytest.raises(NoPlanFits) as caught:  # (far below: under the bound of the model)
        train(resnet(), DATA[:1], True, memory="optimal", budget=proven // 2)
    message = str(caught.value)
    assert "\n" not in message and "smallest budget" in message
    # (its search for the smallest layout follows the measured costs: not the planning
    # device's plan byte for byte)
    assert caught.value.proven <= caught.value.smallest
    # and the budget it names does fit
    train(resnet(), DATA[:1], True, memory="optimal", budget=caught.value.smallest)


def test_ctrl_c_while_solving_leaves_the_model_untouched(monkeypatch):
    m = resnet()
    dev = device.create_cpu_device("256MiB")
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx = tensor.PlaceHolder(DATA[0][0].shape, dev)
    ty = tensor.PlaceHolder(DATA[0][1].shape, dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True, memory="optimal", budget="64MiB")
    before = {k: tensor.to_numpy(v).copy() for k, v in m.get_states().items()}
    real = milp.milp

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(milp, "milp", interrupted)
    tx.copy_from_numpy(DATA[0][0])
    ty.copy_from_numpy(DATA[0][1])
    with pytest.raises(KeyboardInterrupt):
        m(tx, ty)
    for name, value in m.get_states().items():
        np.testing.assert_array_equal(tensor.to_numpy(value), before[name], err_msg=name)
    assert m.compiled_step(tx, ty) is None  # nothing half-compiled was kept
    monkeypatch.setattr(milp, "milp", real)
    m(tx, ty)  # and the next call plans and runs
    assert m.compiled_step(tx, ty).optimal is not None


def test_the_time_limit_reaches_the_solver(monkeypatch):
    """plan(budget, time_limit) gives each round's solve what is left of the limit (a second at
    least: a round cut shorter finds nothing), and HiGHS ends with a proven plan or at its
    limit. The limits HiGHS is given are asserted, not the wall time, which a loaded machine
    stretches (bench/optimal.py times the solver)."""
    limits = []
    real = milp.milp  # scipy.optimize.milp, as milp.py calls it

    def recorded(*args, options, **kwargs):
        limits.append(options["time_limit"])
        return real(*args, options=options, **kwargs)

    monkeypatch.setattr(milp, "milp", recorded)
    planner, _ = recorded_planner(create_model("resnet", depth=56), (32, 3, 32, 32))
    liveness = pool_bytes_needed(planner.liveness, planner.device, joined=True)
    budget = int(0.4 * liveness + 0.6 * planner.outside)
    planner.heuristic_plans()  # made once per planner: not the solver's time
    _, decided = planner.plan(budget, time_limit=1.0)
    assert limits and all(limit <= 1.0 for limit in limits)
    assert decided.status in ("optimal", "time limit")
    limits.clear()  # a small problem, on a clock that has run 7 s when the first round asks
    small, _ = recorded_planner(resnet(), (32, 3, 32, 32))
    liveness = pool_bytes_needed(small.liveness, small.device, joined=True)
    readings = iter([100.0] + [107.0] * 100)  # the deadline's reading, then every later one
    monkeypatch.setattr(optimal, "time", SimpleNamespace(monotonic=lambda: next(readings)))
    small.plan(int(0.6 * liveness + 0.4 * small.outside), time_limit=30.0)
    assert limits and limits[0] == pytest.approx(23.0)  # what is left of 30 s, not 30 s


def throttled(planner, link):
    """The planner's cost model with the copy link at `link` bytes per second."""
    costs = CostModel(planner.costs.seconds, link, planner.costs.source)
    return OptimalPlanner(planner.recorded, planner.kinds, planner.device, False, True, costs)


@pytest.fixture(scope="module")
def slow_link():
    """ResNet-8's problem with copies at 0.5 GB/s: recomputation and offloading trade."""
    planner, _ = recorded_planner(resnet(), (32, 3, 32, 32))
    return throttled(planner, 0.5e9)


@settings(max_examples=6, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=4))
@example(shares=[0.34375, 0.359375])  # the solver's placed plans alone: the larger one slower
@example(shares=[0.0, 3.127431669769075e-07])  # 3 bytes above the smallest peak: off the grain
def test_a_larger_budget_is_never_slower(slow_link, shares):
    """Monotone: at gap 0 the solver's time never grows with the cap; the placed plans'
    predicted times never grow either, within the solver's gaps."""
    problem = slow_link.problem
    low = milp.smallest_peak(problem, 30).peak
    high = float(problem.base.max())
    caps = sorted(low + s * (high - low) for s in shares)
    exact = [milp.fastest(problem, cap, 30, gap=0.0).seconds for cap in caps]
    assert all(b <= a + 1e-12 for a, b in zip(exact, exact[1:]))
    smallest = slow_link.smallest()[1]
    liveness = pool_bytes_needed(slow_link.liveness, slow_link.device, joined=True)
    budgets = sorted(int(smallest + s * (liveness - smallest)) for s in shares)
    plans = [slow_link.plan(b)[1] for b in budgets]
    for small, large in zip(plans, plans[1:]):
        assert large.predicted_seconds <= small.predicted_seconds * (1 + large.gap + 1e-9)


def test_added_seconds_is_the_programs_own_time(slow_link):
    """milp.added_seconds of the solver's choices is its objective less the copies' tie-break,
    at budgets where copies stall and where they hide; the smallest peak's plan (a program of
    bytes, whose seconds are 0) gets its time there, so a budget that falls back to it reports
    the gap from the trivial bound, not 0."""
    problem = slow_link.problem
    low = milp.smallest_peak(problem, 30).peak
    for share in (0.0, 0.3, 1.0):
        cap = low + share * (float(problem.base.max()) - low)
        solution = milp.fastest(problem, cap, 30, gap=0.0)
        copies = sum(t for i in solution.taken for _, t in problem.choices[i].copies)
        added = milp.added_seconds(problem, solution.taken)
        assert added == pytest.approx(solution.seconds - milp.TIE * copies, rel=1e-9, abs=1e-12)
    smallest = milp.smallest_peak(problem, 30)
    assert smallest.seconds == 0.0 and milp.added_seconds(problem, smallest.taken) > 0


def test_it_beats_every_heuristic_that_fits(slow_link):
    """At each heuristic's own pool, the optimal plan is as fast (same cost model), and the
    smallest optimal pool is below every heuristic's. Within 1%: the program prefetches one
    layer ahead or on demand, where vDNN's window (offload="conv", "all") may fetch a tensor
    earlier or later than either, and the layout's fragmentation may cost a round of fewer
    live bytes than the heuristic holds."""
    smallest = slow_link.smallest()[1]
    heuristics = slow_link.heuristic_plans()  # each pool and time as the planner sizes them
    assert len(heuristics) == len(planning.HEURISTICS)
    for name, planned, peak, seconds in heuristics:
        assert seconds == plan_seconds(planned, slow_link.costs, slow_link.recorded), name
        assert smallest <= peak, name
        _, decided = slow_link.plan(peak)
        assert decided.predicted_seconds <= seconds * (1.01 + decided.gap), name


def test_superneurons_alexnet_figure():
    """SuperNeurons' AlexNet at batch 200, data tensors without workspaces: 886.23 MiB with
    all three techniques (Fig. 10; its MB are MiB: 4 x 200x96x55x55 floats = 886.23 MiB)."""
    import nnmem.ops.conv as conv_op

    limit = conv_op.WORKSPACE_LIMIT_BYTES
    conv_op.WORKSPACE_LIMIT_BYTES = 0
    try:
        planner, step = recorded_planner(create_model("alexnet"), (200, 3, 227, 227))
    finally:
        conv_op.WORKSPACE_LIMIT_BYTES = limit
    _, smallest, proven = planner.smallest()
    data = smallest - step.persistent_bytes
    assert data <= 886.23 * 2**20 + 0.005 * 2**20
    assert proven <= smallest


def test_compile_refuses_what_cannot_work():
    dev = device.create_cpu_device("64MiB")
    tx = tensor.PlaceHolder((2, 3, 32, 32), dev)
    for options, message in [
        (dict(use_graph=True, memory="optimal"), "give one"),
        (dict(use_graph=False, memory="optimal", budget="8MiB"), "use_graph=True"),
        (dict(use_graph=True, memory="optimal", budget="8MiB", offload="all"), "decides"),
        (dict(use_graph=True, memory="optimal", budget="8MiB", recompute="speed"), "decides"),
        (dict(use_graph=True, memory="best"), "choose one of"),
    ]:
        m = resnet()
        m.set_optimizer(opt.SGD(lr=0.1))
        with pytest.raises(ValueError, match=message):
            m.compile([tx], **options)


def test_the_cost_model_says_what_it_measured():
    planner, _ = recorded_planner(resnet(), (8, 3, 32, 32))
    assert planner.costs.source == "flop model"
    measured, _ = recorded_planner(resnet(), (8, 3, 32, 32), dev=device.create_cpu_device("64MiB"))
    assert measured.costs.source == "measured"
    assert len(measured.costs.seconds) == len(measured.recorded)
    assert all(s >= 0 for s in measured.costs.seconds) and measured.costs.step_seconds > 0


def test_a_plan_plays_on_two_clocks():
    """costs.plan_seconds: the copies run one after another on the copy stream, beside the
    compute, so a plan's time is at least every copy's and at most compute plus every copy;
    over a link this slow, offloading everything is nearly all copying."""
    planner, _ = recorded_planner(resnet(), (8, 3, 32, 32))
    slow = throttled(planner, 1e6)  # 1 MB/s
    offloading = slow.make_heuristic("none", "all")
    copies = sum(
        slow.costs.copy_seconds(n.fn.nbytes) for n in offloading.nodes if n.stream == "copy"
    )
    seconds = slow.seconds(offloading)
    assert copies <= seconds <= slow.costs.step_seconds + copies
    assert seconds > 0.9 * copies > 10 * slow.costs.step_seconds
    assert slow.seconds(slow.liveness) == pytest.approx(slow.costs.step_seconds)


@pytest.mark.parametrize("batch", [8, 16])
def test_the_flop_model_counts_a_convolution_whatever_its_batch(batch):
    """A 3x3 convolution of 16 channels into 16 on 8x8: 2 N*16*8*8 * 16*3*3 flops in each
    pass, also at batch 16, where the input (N, C, H, W) pairs with the output as the filters
    (O, C, KH, KW) do (before, the larger pair was counted: 8x8/3x3 times too many)."""
    from types import SimpleNamespace as Spec

    from nnmem.graph.costs import flops

    x, w, y = (
        Spec(shape=(batch, 16, 8, 8)),
        Spec(shape=(16, 16, 3, 3)),
        Spec(shape=(batch, 16, 8, 8)),
    )
    expected = 2 * batch * 16 * 8 * 8 * 16 * 3 * 3
    passes = [([y], [x, w]), ([x], [y, w]), ([w], [x, y])]  # forward, backward data, filter
    for writes, reads in passes:
        assert flops(Spec(name="conv:Conv2d", writes=writes, reads=reads)) == expected
