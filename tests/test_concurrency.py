"""Concurrency control (nnmem.graph.concurrency, hill_climbing, corun): the hill climb and
its interpolation, the implicit dependencies that make co-running safe, the co-runner, and
whole training steps whose numbers never change whatever the strategies."""

import threading
import time
from types import SimpleNamespace

import numba
import numpy as np
import pytest

from nnmem import device, opt, tensor
from nnmem.graph.concurrency import POLICIES, check_policy, op_key
from nnmem.graph.corun import CoRunner, hazards, smt_threads_per_core
from nnmem.graph.hill_climbing import Climb, HillClimbing
from nnmem.models import create_model

needs_two_threads = pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2, reason="runs calls with 2 threads: needs 2 cores"
)


# -- hill climbing --------------------------------------------------------------------------
def climb_on(curve, cores, interval, repeats=1, patience=2):
    """Run one key's climb against `curve` (threads -> seconds); the climb and its steps."""
    climbing = HillClimbing(["op"], cores, interval, repeats, patience)
    while not climbing.done:
        climbing.step_done({"op": curve(climbing.threads("op"))})
    return climbing.climbs["op"], climbing.steps


def test_the_climb_stops_where_the_time_rises():
    """A convex curve with its bottom at 5 threads, interval 2. The paper's rule (patience 1):
    1, 3, 5, 7 tried; 7 is slower than 5, so the climb stops. nnmem's default (patience 2)
    also tries 9 (slower again), then all the cores (16), the uniform count; 5 stays best."""
    curve = lambda t: 1.0 / t + 0.04 * t  # noqa: E731
    climb, steps = climb_on(curve, cores=16, interval=2, patience=1)
    assert sorted(climb.tried) == [1, 3, 5, 7, 16]
    assert climb.best == 5
    assert steps == 5
    climb, steps = climb_on(curve, cores=16, interval=2)
    assert sorted(climb.tried) == [1, 3, 5, 7, 9, 16]
    assert climb.best == 5 and steps == 6


def test_the_climb_steps_over_one_bump():
    """A curve shaped like those measured on a 16-core Xeon (ms): 9 threads split the work
    unevenly and are slower than 7, yet 11 is the fastest. The paper's rule (patience 1)
    stops at the bump and keeps 7; patience 2 goes on past it and finds 11."""
    measured = {1: 20.0, 3: 8.0, 5: 5.0, 7: 4.0, 9: 4.4, 11: 3.0, 13: 3.2, 15: 3.4, 16: 4.2}
    climb, _ = climb_on(lambda t: measured[t], cores=16, interval=2, patience=1)
    assert sorted(climb.tried) == [1, 3, 5, 7, 9, 16] and climb.best == 7
    climb, _ = climb_on(lambda t: measured[t], cores=16, interval=2, patience=2)
    assert sorted(climb.tried) == [1, 3, 5, 7, 9, 11, 13, 15, 16] and climb.best == 11


def test_a_climb_that_stops_early_still_tries_all_the_cores():
    """Two bumps in a row stop the climb, at 9 here; all the cores are tried last, so the
    choice is never slower than the uniform count (16) as profiled."""
    measured = {1: 10.0, 3: 5.0, 5: 5.5, 7: 5.6, 16: 4.0}
    climb, steps = climb_on(lambda t: measured[t], cores=16, interval=2)
    assert sorted(climb.tried) == [1, 3, 5, 7, 16]
    assert climb.best == 16 and steps == 5
    measured[16] = 6.0  # all the cores slower: the bottom found by climbing stays
    climb, _ = climb_on(lambda t: measured[t], cores=16, interval=2)
    assert climb.best == 3


def test_slower_means_slower_than_the_best_so_far():
    """7 is faster than 5 but not than 3, the best: still a second count in a row no faster
    than the best, so the climb stops there (and tries all the cores)."""
    measured = {1: 10.0, 3: 5.0, 5: 6.0, 7: 5.5, 9: 4.0, 16: 7.0}
    climb, _ = climb_on(lambda t: measured[t], cores=16, interval=2)
    assert sorted(climb.tried) == [1, 3, 5, 7, 16] and climb.best == 3


def test_the_climb_stops_at_the_cores():
    """Times that keep falling: every count up to the cores is tried (the last one capped at
    the cores), and the most threads win."""
    climb, _ = climb_on(lambda t: 1.0 / t, cores=6, interval=4)
    assert sorted(climb.tried) == [1, 5, 6]
    assert climb.best == 6
    climb, _ = climb_on(lambda t: 1.0 / t, cores=1, interval=1)
    assert climb.tried == {1: 1.0} and climb.best == 1


def test_repeats_keep_the_fastest_sample():
    samples = iter([3.0, 1.0, 0.5, 2.0])  # threads 1 twice, then threads 2 twice
    climbing = HillClimbing(["op"], cores=2, interval=1, repeats=2)
    while not climbing.done:
        climbing.step_done({"op": next(samples)})
    assert climbing.climbs["op"].tried == {1: 1.0, 2: 0.5}
    assert climbing.steps == 4


def test_instances_are_timed_together():
    """Two instances of a key in a step: the step's summed time is shared between them."""
    climbing = HillClimbing(["a", "a", "b"], cores=1)
    climbing.step_done({"a": 4.0, "b": 1.0})
    assert climbing.climbs["a"].instances == 2
    assert climbing.climbs["a"].tried == {1: 2.0}


def test_interpolation_between_tried_counts():
    climb = Climb(cores=9, interval=4, repeats=1)
    climb.tried = {1: 10.0, 5: 2.0, 9: 4.0}
    assert climb.predict(5) == 2.0
    assert climb.predict(3) == pytest.approx(6.0)  # halfway between 1 and 5
    assert climb.predict(7) == pytest.approx(3.0)
    climb.tried = {1: 10.0, 5: 2.0}
    assert climb.predict(8) == 2.0  # past the last tried count: its time
    assert climb.candidates() == [5, 6, 7]  # the three shortest predictions, fewest threads first


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="interval=0"):
        HillClimbing(["op"], cores=2, interval=0)
    with pytest.raises(ValueError, match="repeats=1.5"):
        HillClimbing(["op"], cores=2, repeats=1.5)
    with pytest.raises(ValueError, match="patience=0"):
        HillClimbing(["op"], cores=2, patience=0)
    for bad in ("on", 3, None, "1-5"):
        with pytest.raises(ValueError, match="choose one of"):
            check_policy(bad)
    assert POLICIES["auto"] == (1, 2, 3, 4)


# -- implicit dependencies ------------------------------------------------------------------
def node(reads=(), writes=(), after=()):
    """A stand-in node touching pool byte ranges (start, length)."""

    def specs(ranges):
        return [SimpleNamespace(block=SimpleNamespace(offset=o, nbytes=n)) for o, n in ranges]

    return SimpleNamespace(reads=specs(reads), writes=specs(writes), after=tuple(after))


def test_calls_sharing_planned_bytes_are_ordered():
    """Nodes 0 and 2 are independent in the graph, but the plan gave node 2's output bytes that
    node 1 still reads (the plan reuses them after node 1 in the replay order): node 2 must
    wait for node 1 (write after read) -- and node 3, reading bytes node 2 wrote, for node 2."""
    nodes = [
        node(writes=[(0, 64)]),  # 0: a tensor at bytes 0-64
        node(reads=[(0, 64)], writes=[(128, 64)]),  # 1: reads it
        node(writes=[(32, 64)]),  # 2: its output reuses bytes 32-96
        node(reads=[(64, 16)]),  # 3: reads 64-80, inside node 2's output
        node(writes=[(512, 8)]),  # 4: bytes no one else touches
    ]
    recorded = [set(), {0}, set(), set(), set()]  # the recorded (graph) dependencies
    waits = hazards(nodes, [0, 1, 2, 3, 4], recorded)
    assert waits[1] == {0}
    assert waits[2] == {0, 1}  # write after write (0), write after read (1)
    assert waits[3] == {2}
    assert waits[4] == set()


def test_only_calls_of_the_range_are_waited_for():
    """The commit phase's calls are not in the compute phase's list: a recorded predecessor
    outside the positions is not a wait."""
    nodes = [node(writes=[(0, 8)]), node(reads=[(0, 8)])]
    assert hazards(nodes, [1], [set(), {0}]) == [set()]


# -- the co-runner ---------------------------------------------------------------------------
def sleeper(log, name, seconds):
    def fn():
        log.append((name, "start", time.perf_counter(), threading.current_thread().name))
        time.sleep(seconds)
        log.append((name, "end", time.perf_counter(), numba.get_num_threads()))

    return fn


def plan_of(count, seconds):
    return (count, [count], lambda t: seconds)


@needs_two_threads
def test_independent_calls_co_run_and_dependent_ones_wait():
    """Two independent 1-thread calls on 2 cores overlap; a third that waits for both starts
    after both ended, with its own thread count."""
    log = []
    calls = [
        ("a", sleeper(log, "a", 0.2), []),
        ("b", sleeper(log, "b", 0.2), []),
        ("c", sleeper(log, "c", 0.01), []),
    ]
    runner = CoRunner(cores=2)
    runner.trace = []
    start = time.perf_counter()
    runner.run(calls, [set(), set(), {0, 1}], [plan_of(1, 0.2), plan_of(1, 0.2), plan_of(2, 0.01)])
    elapsed = time.perf_counter() - start
    times = {(n, e): t for n, e, t, _ in log}
    assert times[("b", "start")] < times[("a", "end")]  # co-ran
    assert elapsed < 0.35  # not 0.4: the two sleeps overlapped
    assert times[("c", "start")] >= max(times[("a", "end")], times[("b", "end")])
    threads_used = {n: x for n, e, _, x in log if e == "end"}
    assert threads_used == {"a": 1, "b": 1, "c": 2}
    assert sorted(name for name, *_ in runner.trace) == ["a", "b", "c"]


def test_a_call_alone_runs_on_the_scheduling_thread():
    """A chain (each call waits for the one before) never has two calls ready: every call
    runs on the scheduling thread (lane -1), with its own count, and no worker is handed one;
    two independent calls go to the workers."""
    log = []
    calls = [(name, sleeper(log, name, 0.0), []) for name in "abc"]
    runner = CoRunner(cores=2)
    runner.trace = []
    runner.run(calls, [set(), {0}, {1}], [plan_of(1, 0.1)] * 3)
    assert [lane for _, _, lane, _, _ in runner.trace] == [-1, -1, -1]
    me = threading.current_thread().name
    assert [who for n, e, _, who in log if e == "start"] == [me] * 3
    assert [n for n, e, *_ in log if e == "start"] == ["a", "b", "c"]
    runner.trace = []
    runner.run(calls, [set(), set(), {0, 1}], [plan_of(1, 0.1)] * 3)
    lanes = {name: lane for name, _, lane, _, _ in runner.trace}
    assert lanes["a"] >= 0 and lanes["b"] >= 0 and lanes["c"] == -1


def test_a_runner_given_new_waits_follows_them():
    """The followers are built once per list of waits: a runner given another list (a
    re-planned step) must order its calls by the new one, not the last."""
    log = []
    calls = [(name, sleeper(log, name, 0.0), []) for name in "abc"]
    runner = CoRunner(cores=2)
    runner.run(calls, [set(), {0}, {1}], [plan_of(2, 0.1)] * 3)  # a, b, c
    log.clear()
    runner.run(calls, [{2}, {0}, set()], [plan_of(2, 0.1)] * 3)  # c, a, b
    assert [n for n, e, *_ in log if e == "start"] == ["c", "a", "b"]


def test_a_call_that_would_outlast_the_running_one_waits():
    """Strategy 3: x (the most expensive ready call) starts; y, predicted shorter, co-runs
    beside it; z, ready once y ends but predicted longer than x, waits for x to end."""
    log = []
    calls = [
        ("x", sleeper(log, "x", 0.15), []),
        ("y", sleeper(log, "y", 0.0), []),
        ("z", sleeper(log, "z", 0.0), []),
    ]
    waits = [set(), set(), {1}]
    CoRunner(cores=2).run(calls, waits, [plan_of(1, 1.0), plan_of(1, 0.5), plan_of(1, 5.0)])
    times = {(n, e): t for n, e, t, _ in log}
    # (x is dispatched first, but which of two threads logs its start first is the OS's
    # choice: only the overlap and the wait are the strategy's)
    assert times[("y", "start")] < times[("x", "end")]
    assert times[("z", "start")] >= times[("x", "end")]


def test_a_failure_is_raised_after_the_running_calls_end():
    log = []

    def fail():
        raise ArithmeticError("a kernel failed")

    calls = [
        ("slow", sleeper(log, "slow", 0.2), []),
        ("fail", fail, []),
        ("after", sleeper(log, "after", 0.0), []),
    ]
    with pytest.raises(ArithmeticError, match="a kernel failed"):
        CoRunner(cores=2).run(
            calls, [set(), set(), {1}], [plan_of(1, 0.2), plan_of(1, 0.01), plan_of(1, 0.0)]
        )
    names = [(n, e) for n, e, *_ in log]
    assert ("slow", "end") in names  # waited for
    assert ("after", "start") not in names  # never started


@needs_two_threads
def test_strategy_4_puts_a_small_call_on_a_busy_cores_sibling():
    """With two hardware threads per core: while a call holds every core, the smallest ready
    call starts beside it on a sibling thread, with one thread; without SMT it waits."""
    for smt, beside in ((2, True), (1, False)):
        log = []
        calls = [
            ("big", sleeper(log, "big", 0.15), []),
            ("small", sleeper(log, "small", 0.0), []),
        ]
        runner = CoRunner(cores=2, smt=smt)
        runner.run(calls, [set(), set()], [plan_of(2, 1.0), plan_of(1, 0.1)])
        times = {(n, e): t for n, e, t, _ in log}
        threads = {n: x for n, e, _, x in log if e == "end"}
        assert threads == {"big": 2, "small": 1}
        assert (times[("small", "start")] < times[("big", "end")]) == beside, smt
        assert runner.corun_starts == (1 if beside else 0)


def test_smt_is_read_from_the_topology():
    per_core, source = smt_threads_per_core()
    assert per_core >= 1 and source


# -- whole steps -----------------------------------------------------------------------------
ZOO = {
    "resnet": ((4, 3, 16, 16), dict(depth=8, width=0.25)),
    "inception": ((4, 3, 16, 16), dict(width=0.25, modules=2)),
    "densenet": ((4, 3, 16, 16), dict(growth=4, layers_per_block=2, blocks=2)),
}


def compiled(name, policy, seed=0):
    """(model, tx, ty): the zoo's `name` compiled in graph mode with concurrency `policy`."""
    shape, kwargs = ZOO[name]
    dev = device.create_cpu_device("512MiB")
    dev.SetRandSeed(seed)
    model = create_model(name, num_classes=5, **kwargs)
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx = tensor.PlaceHolder(shape, dev)
    ty = tensor.PlaceHolder(shape[:1], dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True, concurrency=policy)
    return model, tx, ty


def next_batch(tx, ty, rng):
    """Fill the placeholders with the next random batch of `rng`."""
    tx.copy_from_numpy(rng.standard_normal(tx.shape).astype(np.float32))
    ty.copy_from_numpy(rng.integers(0, 5, ty.shape[0]).astype(np.int32))


def loss_of(result):
    return float(tensor.to_numpy(result[1])[0])


def states_of(model):
    return {k: tensor.to_numpy(v) for k, v in model.get_states().items()}


def train(name, policy, steps=7, seed=0):
    """Losses, final states and the compiled step of `steps` training steps."""
    model, tx, ty = compiled(name, policy, seed)
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        next_batch(tx, ty, rng)
        losses.append(loss_of(model(tx, ty)))
    return losses, states_of(model), model.compiled_step(tx, ty)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_strategy_gives_the_same_bits(name):
    """Losses and every parameter, momentum and BatchNorm statistic are bit-identical to the
    serial replay with all the cores, through the profiling steps and after them."""
    losses, states, _ = train(name, "off")
    for policy in ("1", "1-2", "auto"):  # "auto" is 1-4: co-running (3) included
        other_losses, other_states, step = train(name, policy)
        assert other_losses == losses, policy
        for key, value in states.items():
            np.testing.assert_array_equal(other_states[key], value, err_msg=f"{policy} {key}")
        assert step.concurrency_profile()["profiling_done"], policy


def test_operations_do_co_run():
    """The bit-identity above is not vacuous. With every operation's best count made 1 (as on a
    machine where small operations stop scaling at one thread), a ResNet's independent calls
    start beside running ones (the scheduler's own count), the numbers stay those of the serial
    replay, and the traced bars say which worker ran what with how many threads."""
    losses, states, _ = train("resnet", "off", steps=7)
    model, tx, ty = compiled("resnet", "1-3")
    rng = np.random.default_rng(0)
    seen = []
    for i in range(7):
        next_batch(tx, ty, rng)
        if i == 1:  # after the first (recording) step: one thread is best for everything
            step = model.compiled_step(tx, ty)
            for climb in step.concurrency.climbing.climbs.values():
                climb.tried, climb.done = {1: 1e-4, 2: 2e-4}, True
            step.concurrency.trace()
        seen.append(loss_of(model(tx, ty)))
    assert seen == losses
    for key, value in states_of(model).items():
        np.testing.assert_array_equal(value, states[key])
    assert step.concurrency_profile()["corun_starts"] >= 1
    bars = step.concurrency.lanes()
    assert bars and min(start for *_, start, _ in bars) == 0.0
    assert {threads for _, threads, *_ in bars} == {1}
    assert len({lane for _, _, lane, *_ in bars}) >= 2


def test_an_interrupt_in_a_co_run_call_fails_the_step_and_nothing_changes():
    """A Ctrl-C (KeyboardInterrupt) raised by a kernel of the compute phase reaches the caller
    after the running calls ended, and the model's failed step puts every state back; the next
    step then trains on as if nothing had happened."""
    model, tx, ty = compiled("resnet", "1-3")
    next_batch(tx, ty, np.random.default_rng(0))
    for _ in range(6):  # past the profiling steps: the compute phase co-runs
        model(tx, ty)
    before = states_of(model)
    step = model.compiled_step(tx, ty)
    name, fn, arrays = step.calls[step.split - 1]

    def interrupted(*arrays):
        raise KeyboardInterrupt

    step.calls[step.split - 1] = (name, interrupted, arrays)
    with pytest.raises(KeyboardInterrupt):
        model(tx, ty)
    for key, value in states_of(model).items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)
    step.calls[step.split - 1] = (name, fn, arrays)
    assert np.isfinite(loss_of(model(tx, ty)))


def test_the_profile_says_what_was_tried_and_chosen():
    _, _, step = train("inception", "auto")
    profile = step.concurrency_profile()
    cores = numba.config.NUMBA_NUM_THREADS
    assert profile["cores"] == cores and profile["policy"] == "auto"
    assert profile["profiling_steps"] >= 1 and profile["profiling_seconds"] > 0
    assert profile["threading_layer"] in ("tbb", "omp")
    assert profile["strategy_4_active"] == (profile["smt_threads_per_core"] > 1)
    ops = profile["operations"]
    assert any(op["type"].startswith("Conv2d forward") for op in ops.values())
    for op in ops.values():
        assert op["done"] and op["tried"] and min(op["tried"]) == 1
        assert op["best"] in op["tried"] and 1 <= op["type_count"] <= cores
        assert all(seconds > 0 for seconds in op["tried"].values())
    # Strategy 2: every instance of a type runs with one count
    by_type = {}
    for op in ops.values():
        by_type.setdefault(op["type"], set()).add(op["type_count"])
    assert all(len(counts) == 1 for counts in by_type.values())


def test_off_has_no_profile():
    _, _, step = train("resnet", "off", steps=2)
    assert step.concurrency_profile() is None


def test_the_caller_keeps_its_thread_count():
    before = numba.get_num_threads()
    train("resnet", "1-2", steps=4)
    assert numba.get_num_threads() == before


def test_compile_refuses_what_cannot_work():
    dev = device.create_cpu_device("64MiB")
    model = create_model("mlp", hidden=(8,))
    tx = tensor.PlaceHolder((4, 1, 28, 28), dev)
    with pytest.raises(ValueError, match="use_graph=True"):
        model.compile([tx], is_train=True, use_graph=False, concurrency="auto")
    with pytest.raises(ValueError, match="sequential=False"):
        model.compile([tx], is_train=True, use_graph=True, sequential=True, concurrency="1-3")
    with pytest.raises(ValueError, match="cannot be combined"):
        model.compile([tx], is_train=True, use_graph=True, offload="all", concurrency="1-2")
    with pytest.raises(ValueError, match="choose one of"):
        model.compile([tx], is_train=True, use_graph=True, concurrency="fast")
    model.compile([tx], is_train=True, use_graph=True, sequential=True, concurrency="1-2")


def test_keys_tell_operations_apart_by_type_and_shapes():
    _, _, step = train("resnet", "off", steps=1)
    keys = {op_key(step.nodes[i]) for i in step.order}
    types = {k[0] for k in keys}
    assert any(t.startswith("Conv2d forward") for t in types)
    assert any(t.startswith("Conv2d backward") for t in types)
    assert len(keys) > len(types)  # the same type at several shapes
