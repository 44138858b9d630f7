"""Exercise 7 (tutorial 08): the optimal planner's memory rows, nnmem/graph/milp.py:memory_rows.

The live bytes of the step stay within the cap at every position; memory_rows writes that once
per segment of positions, carrying the MiB the taken choices save from one segment to the next
(exercises/08_memory_rows.md). The tests read the rows back as a linear program: with the
choices fixed, they must be satisfiable exactly when a plainer account, position by position,
keeps every position within the cap, and with the cap a variable its least value must be the
peak. They count the rows, solve whole programs against brute force, and train a ResNet with
memory="optimal"."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import Bounds, LinearConstraint, milp
from training import assert_identical, batches, train

from nnmem import device, opt, tensor
from nnmem.graph.milp import (
    MIB,
    RELATIVE_GAP,
    Choice,
    Infeasible,
    Problem,
    fastest,
    memory_rows,
    smallest_peak,
)
from nnmem.graph.optimal import OptimalPlanner
from nnmem.graph.plan import pool_bytes_needed
from nnmem.models import create_model

pytestmark = pytest.mark.exercise_memory_rows

KIB = 1024
PAGE = 4 * KIB  # sizes in the random problems are whole pages; caps fall between two sizes


def choice(tensor_, nbytes, frees, extra=(), decision="offload"):
    return Choice(tensor_, decision, nbytes, tuple(frees), 0.0, (), tuple(extra))


def normalised(rows):
    """The rows as a sorted list of (entries merged by column, lower, upper): any order of the
    rows and of their entries compares equal."""
    out = []
    for entries, lower, upper in rows:
        merged = {}
        for column, value in entries:
            merged[column] = merged.get(column, 0.0) + value
        terms = tuple(sorted((c, round(v, 9)) for c, v in merged.items() if v != 0))
        out.append((terms, round(lower, 9), round(upper, 9)))
    return sorted(out)


def live_bytes(base, choices, taken):
    """The plainer account: at each position, base minus what the taken choices save there."""
    live = np.asarray(base, dtype=float).copy()
    for i in taken:
        for a, b, saved in choices[i].intervals():
            live[a : b + 1] -= saved
    return live


def read_back(rows, columns, x, minimise=None):
    """The rows as a linear program with the x columns fixed to `x` (0/1): None when no values
    of the other columns satisfy them, else the least value of column `minimise` (0 when
    None). Columns other than x are free."""
    lower = np.full(columns, -np.inf)
    upper = np.full(columns, np.inf)
    lower[: len(x)] = upper[: len(x)] = x
    matrix = np.zeros((len(rows), columns))
    for r, (entries, _, _) in enumerate(rows):
        for column, value in entries:
            matrix[r, column] += value
    objective = np.zeros(columns)
    if minimise is not None:
        objective[minimise] = 1.0
    constraints = []
    if rows:
        constraints = [
            LinearConstraint(matrix, [lo for _, lo, _ in rows], [hi for _, _, hi in rows])
        ]
    result = milp(objective, bounds=Bounds(lower, upper), constraints=constraints)
    if result.status == 2:
        return None
    assert result.status == 0, result.message
    return result.fun


# -- hand-made problems ----------------------------------------------------------------------


BASE = np.array([1, 3, 3, 2]) * MIB  # a peak at positions 1 and 2


def test_one_choice_over_the_peak_cap_rows_where_the_base_exceeds_it():
    # x0 frees 1 MiB at positions 1..2: segments [0, 1), [1, 3), [3, 4); columns x0, saved 1..3
    choices = [choice(0, MIB, [(1, 2)])]
    segments, rows = memory_rows(BASE, choices, 2.5 * MIB)
    assert segments == [(0, 1), (1, 3), (3, 4)]
    assert normalised(rows) == normalised([
        ([(1, 1.0)], 0.0, 0.0),  # saved0 = 0
        ([(2, 1.0), (1, -1.0), (0, -1.0)], 0.0, 0.0),  # saved1 = saved0 + x0
        ([(2, -1.0)], -np.inf, 2.5 - 3.0),  # 3 - saved1 <= 2.5: the only segment above 2.5
        ([(3, 1.0), (2, -1.0), (0, 1.0)], 0.0, 0.0),  # saved2 = saved1 - x0
    ])  # fmt: skip


def test_with_the_cap_a_variable_every_segment_has_a_cap_row():
    choices = [choice(0, MIB, [(1, 2)])]
    segments, rows = memory_rows(BASE, choices, None)
    z = 1 + len(segments)
    caps = [row for row in rows if row[1] == -np.inf]
    assert normalised(caps) == normalised([
        ([(1, -1.0), (z, -1.0)], -np.inf, -1.0),
        ([(2, -1.0), (z, -1.0)], -np.inf, -3.0),
        ([(3, -1.0), (z, -1.0)], -np.inf, -2.0),
    ])  # fmt: skip
    assert read_back(rows, z + 1, [1], minimise=z) == pytest.approx(2.0)  # the peak, in MiB
    assert read_back(rows, z + 1, [0], minimise=z) == pytest.approx(3.0)


def test_an_extra_adds_bytes_where_it_lands():
    # a recomputation that frees 2 MiB at 0..1 and adds 1 MiB at position 3, where it runs
    base = np.array([3, 3, 1, 2]) * MIB
    choices = [choice(0, 2 * MIB, [(0, 1)], extra=[(3, MIB)], decision="recompute")]
    segments, rows = memory_rows(base, choices, 2.5 * MIB)
    assert segments == [(0, 2), (2, 3), (3, 4)]
    columns = 1 + len(segments)
    assert read_back(rows, columns, [0]) is None  # 3 MiB at positions 0 and 1
    # 3 MiB at position 3: the base there is 2 MiB, under the cap, but the extra is not
    assert read_back(rows, columns, [1]) is None
    _, rows = memory_rows(base, choices, 3.5 * MIB)
    assert read_back(rows, columns, [1]) is not None


def test_two_intervals_of_one_choice_and_two_choices_starting_together():
    choices = [choice(0, MIB, [(0, 0), (2, 3)]), choice(1, 2 * MIB, [(2, 2)])]
    segments, rows = memory_rows(BASE, choices, 0.5 * MIB)
    assert segments == [(0, 1), (1, 2), (2, 3), (3, 4)]
    columns = 2 + len(segments)
    for x in itertools.product([0, 1], repeat=2):
        live = live_bytes(BASE, choices, [i for i in range(2) if x[i]])
        feasible = read_back(rows, columns, list(x)) is not None
        assert feasible == bool((live <= 0.5 * MIB).all()), x


def test_no_choices_one_segment_and_no_positions_no_rows():
    segments, rows = memory_rows(BASE, [], 2 * MIB)
    assert segments == [(0, 4)]
    assert read_back(rows, 1, []) is None  # 3 MiB > 2 MiB, and nothing to take
    segments, rows = memory_rows(BASE, [], 3 * MIB)
    assert read_back(rows, 1, []) is not None
    assert memory_rows(np.zeros(0), [], MIB) == ([], [])


def test_the_rows_grow_with_the_choices_not_with_the_positions():
    base = np.zeros(100_000)
    base[:90_001] = 5 * MIB
    choices = [choice(t, MIB, [(10 * t, 90_000 + t)]) for t in range(3)]
    segments, rows = memory_rows(base, choices, 3 * MIB)
    assert len(segments) == 6 and len(rows) <= 2 * len(segments)
    columns = 3 + len(segments)
    assert read_back(rows, columns, [1, 1, 1]) is None  # 4 MiB at positions 0..9
    _, rows = memory_rows(base, choices, 4 * MIB)
    assert read_back(rows, columns, [1, 1, 1]) is not None
    assert read_back(rows, columns, [0, 1, 1]) is None  # 5 MiB at positions 0..9


# -- random problems against the plainer account ---------------------------------------------


@st.composite
def problems(draw, max_choices=6):
    """(base, choices): tensors with live ranges make up base; each choice frees one or two
    intervals inside its tensor's live range, and may add bytes at a position (an extra)."""
    positions = draw(st.integers(1, 24))
    position = st.integers(0, positions - 1)
    base = np.array([draw(st.integers(0, 8)) * PAGE for _ in range(positions)], dtype=float)
    choices = []
    for t in range(draw(st.integers(0, max_choices))):
        first, last = sorted((draw(position), draw(position)))
        nbytes = draw(st.integers(1, 16)) * PAGE
        base[first : last + 1] += nbytes
        for _ in range(draw(st.integers(1, 2))):
            if len(choices) == max_choices:
                break
            a, b = sorted(draw(st.integers(first, last)) for _ in range(2))
            frees = [(a, b)]
            c, d = sorted(draw(st.integers(first, last)) for _ in range(2))
            if draw(st.booleans()) and c > b + 1:
                frees.append((c, d))
            extra = []
            if draw(st.booleans()):
                extra.append((draw(position), draw(st.integers(0, 8)) * PAGE))
            decision = draw(st.sampled_from(["recompute", "offload"]))
            choices.append(choice(t, nbytes, frees, extra, decision))
    return base, choices


def a_cap(draw, base):
    """A cap half a page off every possible live byte count (the program's MiB compare exactly)."""
    return draw(st.integers(0, int(base.max() // PAGE) + 10)) * PAGE + PAGE / 2


@given(problems(), st.data())
def test_random_rows_are_satisfiable_exactly_when_every_position_fits(problem, data):
    base, choices = problem
    cap = a_cap(data.draw, base)
    x = data.draw(st.lists(st.integers(0, 1), min_size=len(choices), max_size=len(choices)))
    segments, rows = memory_rows(base, choices, cap)
    live = live_bytes(base, choices, [i for i in range(len(choices)) if x[i]])
    feasible = read_back(rows, len(choices) + len(segments), x) is not None
    assert feasible == bool((live <= cap).all())


@given(problems(), st.data())
def test_random_rows_with_the_cap_a_variable_reach_the_peak(problem, data):
    base, choices = problem
    x = data.draw(st.lists(st.integers(0, 1), min_size=len(choices), max_size=len(choices)))
    segments, rows = memory_rows(base, choices, None)
    z = len(choices) + len(segments)
    live = live_bytes(base, choices, [i for i in range(len(choices)) if x[i]])
    assert read_back(rows, z + 1, x, minimise=z) == pytest.approx(live.max() / MIB, abs=1e-9)


@given(problems(max_choices=8), st.data())
def test_random_segments_and_the_size_of_the_rows(problem, data):
    base, choices = problem
    cap = data.draw(st.sampled_from([None, a_cap(data.draw, base)]))
    segments, rows = memory_rows(base, choices, cap)
    points = {0, len(base)}
    for c in choices:
        points |= {p for a, b, _ in c.intervals() for p in (a, b + 1)}
    cuts = sorted(points)
    assert segments == list(zip(cuts[:-1], cuts[1:]))
    assert len(rows) <= 2 * len(segments)
    for i, c in enumerate(choices):
        appearances = sum(any(col == i and v != 0 for col, v in entries) for entries, _, _ in rows)
        assert appearances <= 2 * len(c.intervals()), f"choice {i} in {appearances} rows"


# -- the whole program against brute force ---------------------------------------------------


def brute_force(base, choices, exclusive):
    """{taken: live-bytes peak} of every choice of decisions the other rows allow: one
    decision per tensor, no exclusive pair."""
    found = {}
    for x in itertools.product([0, 1], repeat=len(choices)):
        taken = tuple(i for i in range(len(choices)) if x[i])
        tensors = [choices[i].tensor for i in taken]
        if len(set(tensors)) < len(tensors) or any(i in taken and j in taken for i, j in exclusive):
            continue
        found[taken] = live_bytes(base, choices, taken).max()
    return found


@given(problems(), st.data())
def test_the_solver_with_these_rows_finds_what_brute_force_finds(problem, data):
    base, choices = problem
    pairs = [
        (i, j)
        for i in range(len(choices))
        for j in range(i)
        if choices[i].tensor != choices[j].tensor
    ]
    exclusive = ()
    if pairs:
        exclusive = tuple(data.draw(st.lists(st.sampled_from(pairs), max_size=2, unique=True)))
    program = Problem(base, tuple(choices), {}, exclusive)
    peaks = brute_force(base, choices, exclusive)
    least = min(peaks.values())
    smallest = smallest_peak(program, 10)
    assert smallest.bound <= least + 1 and least <= smallest.peak <= least * (1 + RELATIVE_GAP) + 1
    cap = a_cap(data.draw, base)
    if least > cap:
        with pytest.raises(Infeasible):
            fastest(program, cap, 10)
    else:
        solution = fastest(program, cap, 10)
        assert solution.taken in peaks and peaks[solution.taken] <= cap


# -- the planner, which solves the program with these rows -----------------------------------


SHAPE = (8, 3, 32, 32)
DATA = batches(SHAPE, 2)


def test_resnet_plans_fit_their_budgets_and_change_no_number():
    dev = device.create_planning_device()
    model = create_model("resnet", depth=8)
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    tx = tensor.PlaceHolder(SHAPE, dev)
    ty = tensor.PlaceHolder((SHAPE[0],), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True)
    tx.set_value(0)
    ty.set_value(0)
    model(tx, ty)
    step = model.compiled_step(tx, ty)
    planner = OptimalPlanner(step.recorded, step.recorded_kinds, dev, False, True)
    _, smallest, _ = planner.smallest()
    liveness = pool_bytes_needed(planner.liveness, dev, joined=True)
    assert smallest < liveness
    reference = train(create_model("resnet", depth=8), DATA, use_graph=True)
    for budget in ((smallest + liveness) // 2, smallest):
        run = train(create_model("resnet", depth=8), DATA, True, memory="optimal", budget=budget)
        assert_identical(reference, run)
        assert run[2].memory_stats()["high_water_bytes"] <= budget
