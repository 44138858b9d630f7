"""The optimal planner's mixed-integer linear program, solved by HiGHS (scipy.optimize.milp).

Why HiGHS through scipy: it is open source, exact (branch and bound with a proven dual bound,
so every answer comes with its optimality gap), it honours a time limit, and scipy, a
well-kept package with wheels everywhere, brings it with no other dependency. CP-SAT
(OR-Tools) would need integer coefficients and a package of 30 MB more.

The model, as graph/optimal.py fills it in for a recorded training step:

  Data. Positions p = 0..P-1 of the replay order. base[p]: the bytes of intermediate blocks
  live at p when every tensor is kept (the liveness plan). Choices c = (tensor t, decision d)
  with d = recompute or offload, each with:
    bytes[c]    the tensor's bytes;
    frees[c]    the positions where t is then off the device (intervals [a, b]);
    extra[c]    bytes it adds elsewhere, (position, bytes): a recomputation's transient
                tensors (the rest of its chain, the recipe's other outputs) where it runs;
    seconds[c]  time it adds for sure (recompute: its producer once more);
    copies[c]   the copies it adds, as (window w, seconds) pairs: a window is the compute of
                one layer that the copy overlaps (the layer after its producer for a
                copy-out, the layer it is prefetched at for a prefetch);
  compute[w]: the seconds of window w's layer; exclusive pairs (c, c') that cannot both be
  taken (a tensor rebuilt from another tensor that is itself rebuilt, or brought back later).

  Variables. x[c] in {0, 1} (take choice c); stall[w] >= 0 (seconds the compute stream waits
  for copies in window w); saved[s] (bytes freed less bytes added in segment s, see below).

  Objective. minimise  sum_c seconds[c] x[c] + sum_w stall[w]
  (the step's predicted time is the time with no technique plus this), plus TIE times the
  copies' seconds, so that of plans equally fast the one that copies least wins.

  Constraints.
    one decision per tensor:  sum_{d} x[(t, d)] <= 1              (keep is taking neither)
    exclusive pairs:          x[c] + x[c'] <= 1
    copies hide or stall:     sum_{c, (w, s) in copies[c]} s x[c] - stall[w] <= compute[w]
    memory at every position:
        base[p] - sum_{c: p in frees[c]} bytes[c] x[c] + sum_{c: (p, e) in extra[c]} e x[c] <= cap

  The memory rows are not written once per position: the positions are cut into segments at
  every interval's ends, inside which the freed bytes do not change, and only the segment's
  largest base counts. The freed bytes are carried from segment to segment,
      saved[s] = saved[s-1] + sum of bytes[c] x[c] whose interval starts at s
                            - sum of bytes[c] x[c] whose interval ended before s
      (an extra is an interval of one position with negative bytes),
  so every choice appears in two rows per interval, not in every row its interval covers:
  the matrix grows with the number of tensors, not with tensors times positions.

  The smallest feasible cap is the same program with cap a variable Z and the objective
  "minimise Z" (smallest_peak).

Units inside the solver: MiB and microseconds (coefficients well above HiGHS's tolerances,
which are absolute as well as relative); every figure returned is in bytes and seconds. A cap
is first rounded down to the problem's grain (on_the_grain), so that no slack is as small as
those tolerances.
"""

import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

MIB, US = 2.0**20, 1e-6
#: Stop when the incumbent is proven within this fraction of the optimum.
RELATIVE_GAP = 0.005
#: The weight of a copy's own seconds in the objective: ties between plans equally fast (all
#: copies hidden) go to the one that copies least.
TIE = 1e-3


@dataclass(frozen=True)
class Choice:
    """One way to take a tensor off the device (see the module's docstring)."""

    tensor: int  # the tensor's index in the problem
    decision: str  # "recompute" or "offload"
    nbytes: int
    frees: tuple  # ((a, b), ...) positions, inclusive
    seconds: float
    copies: tuple  # ((window, seconds), ...)
    extra: tuple = ()  # ((position, bytes), ...)

    def intervals(self):
        """((a, b, bytes saved), ...): the frees, and each extra as a negative saving."""
        return tuple((a, b, self.nbytes) for a, b in self.frees) + tuple(
            (p, p, -e) for p, e in self.extra
        )


@dataclass(frozen=True)
class Problem:
    base: np.ndarray  # bytes live at each position with every tensor kept
    choices: tuple  # Choice
    compute: dict  # window -> seconds
    exclusive: tuple  # ((i, j), ...) indices into choices


@dataclass(frozen=True)
class Solution:
    """taken: indices of the choices taken; seconds: the objective (time added to the step);
    bound: the solver's proven lower bound on it; gap: (seconds - bound) / seconds (0 when
    proven optimal); peak: the live bytes the model predicts at the busiest position;
    status: "optimal", "time limit" (the best plan found, with its gap) or "infeasible";
    solve_seconds: wall time in HiGHS."""

    taken: tuple
    seconds: float
    bound: float
    gap: float
    peak: int
    status: str
    solve_seconds: float


class Infeasible(Exception):
    """No choice of decisions fits the cap."""


def fastest(problem, cap, time_limit, gap=RELATIVE_GAP):
    """The Solution of least added time whose live bytes stay within `cap` at every position
    (Infeasible when none does, or when the time limit ran out before any was found); the
    solver stops once it proves the plan within `gap` of the optimum."""
    return _solve(problem, on_the_grain(problem, cap), time_limit, gap)


def added_seconds(problem, taken):
    """The time the choices `taken` (indices) add in the program's model of the step: their own
    seconds, and each window's stall, the seconds of the copies it carries beyond its compute
    (the objective less its copy tie-break, TIE). For a plan the program did not time: the
    smallest peak's, whose objective is bytes."""
    seconds, load = 0.0, {}
    for i in taken:
        seconds += problem.choices[i].seconds
        for w, s in problem.choices[i].copies:
            load[w] = load.get(w, 0.0) + s
    return seconds + sum(max(0.0, s - problem.compute[w]) for w, s in load.items())


def on_the_grain(problem, cap):
    """`cap` rounded down to a whole number of the problem's grain, the greatest common divisor
    of its byte figures (base, tensors, extras: the pool's alignment, 256 bytes, for a recorded
    step). Every plan's live bytes are a multiple of the grain, so no plan's fit changes; but
    a cap a few bytes above a plan's peak leaves a slack of about 1e-6 MiB, HiGHS's own
    feasibility tolerance, and its presolve then proved a slower plan "optimal" (ResNet-8 at
    its smallest peak + 3 bytes: 29.65 ms where 29.44 ms fits). On the grain, a slack is 0 or
    at least one grain, 2.4e-4 MiB."""
    figures = [int(b) for b in problem.base] + [c.nbytes for c in problem.choices]
    figures += [e for c in problem.choices for _, e in c.extra]
    grain = math.gcd(*figures) or 1
    return math.floor(cap / grain) * grain


def smallest_peak(problem, time_limit):
    """The Solution of the smallest live-bytes peak (its `bound`: the solver's lower bound on
    any choice's peak, in bytes): the program with the cap as a variable, minimised."""
    return _solve(problem, None, time_limit, RELATIVE_GAP)


def memory_rows(base, choices, cap):
    """The memory rows of the program: the live bytes stay within `cap` at every position,
    written once per segment of positions, not once per position (the module's docstring).

    base: the bytes live at each position with every tensor kept; choices: the Choices, each
    saving `bytes` at the positions a..b of every (a, b, bytes) in its intervals() (negative
    bytes: an extra, bytes it adds there); cap: the bytes allowed, or None when the peak Z is
    the variable being minimised.

    Segments: the positions 0..len(base)-1 cut at every interval's a and b + 1 (and at 0 and
    len(base)), as (start, stop) pairs in order, stop excluded: inside a segment no choice
    starts or stops saving, so the bytes saved are the same at all its positions.

    Columns: x[i] (choice i taken) is column i; saved[s], the MiB the taken choices save in
    segment s (negative where extras outweigh frees), is column len(choices) + s; Z is column
    len(choices) + len(segments).

    Rows, each (entries, lower, upper) with entries [(column, coefficient), ...], in MiB (bytes
    / MIB):
      carry, one per segment s: saved[s] - saved[s-1] - sum of (bytes / MIB) x[i] over the
        intervals that start at s + sum of (bytes / MIB) x[i] over those that end just before s
        = 0 (no saved[s-1] term for s = 0): saved[s] is the MiB saved in segment s;
      cap, one per segment whose largest base plus every extra that may land in it exceeds
        `cap` (no other segment can): top[s] - saved[s] <= cap / MIB, where top[s] is the
        segment's largest base in MiB; when cap is None, one per segment:
        top[s] - saved[s] - Z <= 0.
    Each interval appears in two rows at most, where it starts and just after it ends: the
    rows grow with the number of intervals, not with intervals times positions.

    Returns (segments, rows)."""
    points = {0, len(base)}
    for c in choices:
        for a, b, _ in c.intervals():
            points.update((a, b + 1))
    cuts = sorted(points)
    segments = list(zip(cuts[:-1], cuts[1:]))
    segment_at = {a: s for s, (a, _) in enumerate(segments)}
    starts, ends = {}, {}  # segment -> [(choice, MiB saved)] of the intervals starting, ended
    added = np.zeros(len(segments))  # the most MiB the extras can add in each segment
    for i, c in enumerate(choices):
        for a, b, saved in c.intervals():
            starts.setdefault(segment_at[a], []).append((i, saved / MIB))
            if b + 1 in segment_at:
                ends.setdefault(segment_at[b + 1], []).append((i, saved / MIB))
            if saved < 0:
                added[segment_at[a]] -= saved / MIB
    n, z = len(choices), len(choices) + len(segments)
    rows = []
    for s, (a, b) in enumerate(segments):
        carry = [(n + s, 1.0)] + ([(n + s - 1, -1.0)] if s else [])
        carry += [(i, -v) for i, v in starts.get(s, ())]
        carry += [(i, v) for i, v in ends.get(s, ())]
        rows.append((carry, 0.0, 0.0))
        top = float(base[a:b].max()) / MIB
        if cap is None:
            rows.append(([(n + s, -1.0), (z, -1.0)], -np.inf, -top))
        elif top + added[s] > cap / MIB:
            rows.append(([(n + s, -1.0)], -np.inf, cap / MIB - top))
    return segments, rows


def _solve(problem, cap, time_limit, gap):
    choices, base = problem.choices, problem.base
    segments, memory = memory_rows(base, choices, cap)
    windows = sorted(problem.compute, key=str)
    window_of = {w: i for i, w in enumerate(windows)}
    # variables: x (n), stall (len(windows)), saved (len(segments): may be negative where
    # extras outweigh frees), Z (minimising the peak)
    nx, nw, ns = len(choices), len(windows), len(segments)
    z = nx + nw + ns
    nvars = z + (1 if cap is None else 0)
    rows, cols, vals, lower, upper = [], [], [], [], []
    row = 0

    def add(entries, lo, hi):
        nonlocal row
        for col, val in entries:
            rows.append(row)
            cols.append(col)
            vals.append(val)
        lower.append(lo)
        upper.append(hi)
        row += 1

    by_tensor = {}
    for i, c in enumerate(choices):
        by_tensor.setdefault(c.tensor, []).append(i)
    for same in by_tensor.values():
        if len(same) > 1:
            add([(i, 1.0) for i in same], -np.inf, 1.0)
    for i, j in problem.exclusive:
        add([(i, 1.0), (j, 1.0)], -np.inf, 1.0)
    copies = {}
    for i, c in enumerate(choices):
        for w, s in c.copies:
            copies.setdefault(w, []).append((i, s / US))
    for w, entries in copies.items():
        if cap is not None:  # (the smallest peak does not depend on times: no rows of them)
            add(entries + [(nx + window_of[w], -1.0)], -np.inf, problem.compute[w] / US)
    # memory_rows numbers saved and Z from len(choices) on; here the stalls come first
    for entries, lo, hi in memory:
        add([(col if col < nx else col + nw, v) for col, v in entries], lo, hi)
    objective = np.zeros(nvars)
    if cap is None:
        objective[z] = 1.0
    else:  # of plans as fast, the one that copies least (a hidden copy still uses the link)
        objective[:nx] = [(c.seconds + TIE * sum(t for _, t in c.copies)) / US for c in choices]
        objective[nx : nx + nw] = 1.0
    integrality = np.zeros(nvars)
    integrality[:nx] = 1
    low = np.zeros(nvars)
    low[nx + nw : nx + nw + ns] = -np.inf
    bounds = Bounds(low, np.r_[np.ones(nx), np.full(nvars - nx, np.inf)])
    matrix = coo_array((vals, (rows, cols)), shape=(row, nvars)).tocsr()
    constraints = [LinearConstraint(matrix, lower, upper)] if row else []
    start = time.perf_counter()
    with _solver_output_silenced():
        result = milp(
            objective,
            integrality=integrality,
            bounds=bounds,
            constraints=constraints,
            options={"time_limit": float(time_limit), "mip_rel_gap": gap},
        )
    seconds = time.perf_counter() - start
    if result.x is None:
        status = "infeasible" if result.status == 2 else f"no plan found ({result.message})"
        raise Infeasible(status)
    x = np.round(result.x[:nx]).astype(bool)
    taken = tuple(int(i) for i in np.flatnonzero(x))
    freed = np.zeros(len(base) + 1)
    for i in taken:
        for a, b, saved in choices[i].intervals():
            freed[a] += saved
            freed[b + 1] -= saved
    peak = int(max((base - np.cumsum(freed)[:-1]).max(), 0)) if len(base) else 0
    status = "optimal" if result.status == 0 else "time limit"
    if cap is None:  # the bound is on the peak, in bytes
        bound = float(result.mip_dual_bound if result.mip_dual_bound is not None else 0.0)
        return Solution(taken, 0.0, min(bound * MIB, peak), 0.0, peak, status, seconds)
    value = float(result.fun) * US
    bound = float(result.mip_dual_bound if result.mip_dual_bound is not None else result.fun) * US
    bound = min(bound, value)
    gap = (value - bound) / value if value > 0 else 0.0
    # a bound on time + TIE x copies: less every copy's share, it bounds the time alone
    bound = max(bound - TIE * sum(t for c in choices for _, t in c.copies), 0.0)
    return Solution(taken, value, bound, gap, peak, status, seconds)


@contextlib.contextmanager
def _solver_output_silenced():
    """HiGHS (C++) sometimes writes a line of its own debugging to the process's stdout, even
    with its display off; in the middle of nnmem plan's table, it would read as part of it.
    File descriptor 1 points at /dev/null while it solves, and back after."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
