"""The optimal plan: keep, recompute or offload each tensor, chosen together, fastest within a
budget (memory="optimal").

The heuristics apply one technique after another, each by its paper's fixed rule, so they do
not add up. This pass asks the question a user who runs out of memory asks, *what is the
fastest way to train this step in B bytes?*, and answers it with a bound on how close it is:

1. the cost model (costs.py): the time of every recorded node, and of a copy per byte;
2. the problem (milp.py's model; its choices: choices.py), built on the liveness plan of
   the recorded step:
   - base[p], the bytes live at each position with every tensor kept;
   - per tensor that backward reads, its choices: recompute it (rebuilt once before its first
     backward reader, from tensors that are there: recompute.rebuild_candidates), or offload
     it (copied out after its producer, released a layer later, prefetched one backward layer
     ahead of its first reader or at the start of that reader's layer:
     offload.prefetch_ahead); and per weight gradient that only the commit reads, offload it
     until the last backward layer (every copy is done before the commit: a failed step
     still changes nothing);
   - what each choice frees (the positions the tensor is then off the device) and costs (the
     producer's time again, or the copies, which stall only what the layer they overlap
     cannot hide);
3. HiGHS solves it within a time limit (milp.py) and proves a bound on its objective;
4. the decisions go to the rewrites that exist already (recompute.py, offload.py) and the
   layout (plan.make_plan with Decisions). The model counts live bytes; the layout may need a
   little more (fragmentation), so the placed plan's pool bytes are checked against the
   budget, and when they overshoot the problem is solved again with the cap set below that
   solution's live peak by the overshoot (at most ROUNDS times);
5. the plan is played on the compute and copy clocks (costs.plan_seconds) beside the
   heuristics' plans that fit and the plans found for other budgets that fit: the fastest is
   returned (OptimalPlan.source names it). The program's bound is in its own model of the
   copies (hidden only by the layer they overlap), so a played time may fall below it.

A budget no plan fits raises NoPlanFits, naming the smallest budget the optimal plan reaches
and the program's bound on the live bytes of any choice.
Recomputation and offloading copy values and change no kernel, so the losses of an optimal
plan are those of the step with no technique, bit for bit, at every budget.
"""

import dataclasses
import functools
import time
from dataclasses import dataclass

from nnmem.graph import milp
from nnmem.graph.choices import ON_DEMAND, problem_of
from nnmem.graph.costs import cost_model, plan_seconds
from nnmem.graph.liveness import block_kinds
from nnmem.graph.plan import Decisions, make_plan, plan_as_asked, pool_bytes_needed
from nnmem.memory.units import format_bytes

#: The heuristics' plans (recompute policy, offload policy) the planner weighs beside the
#: solver's: every recompute policy with every offload policy.
HEURISTICS = [
    (recompute, offload)
    for recompute in ("none", "speed", "memory", "cost-aware")
    for offload in ("none", "conv", "all")
]
#: Seconds the solver may take, in all (the tightening rounds share it).
TIME_LIMIT = 60.0
#: Solves at most, lowering the cap each time the placed plan overshoots the budget.
ROUNDS = 8
#: Bisection steps of smallest() between the solver's bound and the plan of least live bytes.
SEARCH_STEPS = 4


class NoPlanFits(MemoryError):
    """memory="optimal": no plan of this step fits the budget."""

    def __init__(self, budget, smallest, proven):
        self.budget, self.smallest, self.proven = budget, smallest, proven
        super().__init__(
            f"memory='optimal': no plan of this step fits a budget of {format_bytes(budget)}; "
            f"the smallest budget its optimal plan fits is {format_bytes(smallest)} (the solver "
            f"proved that every choice of keep, recompute and offload has at least "
            f"{format_bytes(proven)} in the pool at its peak): "
            f"give budget='{-(-smallest // 2**20)}MiB' or more"
        )


@dataclass(frozen=True)
class OptimalPlan:
    """What the optimal planner decided and proved for one step.

    budget: the pool bytes it was asked to fit; pool_bytes: what the placed plan needs;
    step_seconds: the cost model's time of the step with no technique; predicted_seconds: of
    the placed plan, played on the compute and copy clocks (costs.plan_seconds: the same
    figure for every plan, heuristic or not); lower_bound_seconds: the program's proof that
    no choice of decisions is faster at this budget in its model of the step (milp.py: a copy
    hidden only by the layer it overlaps; the engine's copy stream hides more, so a played
    time may fall below it); gap: the program's relative gap, (its plan's time - the bound) /
    its plan's time in that model; status: "optimal" or "time limit";
    solve_seconds: in the solver, every round; rounds: how many solves; cost_source:
    "measured" or "flop model"; rows: memory_decisions()'s rows; source: "solver", or the
    heuristic (e.g. "recompute speed + offload all") whose plan fits and is faster by the
    same cost model (OptimalPlanner.plan)."""

    decisions: Decisions
    budget: int
    pool_bytes: int
    step_seconds: float
    predicted_seconds: float
    lower_bound_seconds: float
    gap: float
    status: str
    solve_seconds: float
    rounds: int
    cost_source: str
    rows: tuple
    source: str = "solver"


class OptimalPlanner:
    """The problem of one recorded step, built once, solved for any budget."""

    def __init__(self, recorded, recorded_kinds, device, sequential, joined, costs=None):
        self.recorded, self.kinds, self.device = recorded, recorded_kinds, device
        self.sequential, self.joined = sequential, joined
        self.costs = cost_model(recorded, device) if costs is None else costs
        self.liveness = plan_as_asked(recorded, recorded_kinds, device, sequential, "none", "none")
        # the pool outside the arena: what the budget must hold besides the plan's arena
        arena = self.liveness.layout.arena_bytes
        self.outside = pool_bytes_needed(self.liveness, device, joined) - arena
        self.problem, self.tensors = problem_of(self, recorded, recorded_kinds)
        self._smallest_found = None
        self._heuristics = None
        self._found = []  # (Plan, OptimalPlan) of every budget planned so far

    def plan(self, budget, time_limit=TIME_LIMIT):
        """(Plan, OptimalPlan): the fastest plan whose placed pool fits `budget` bytes.

        When the rounds run out (or the cap falls below every solution), the smallest plan
        found (smallest()) is taken if it fits: so every budget from smallest()'s up has one.
        Of the solver's plan, the heuristics' and the plans this planner found for other
        budgets, the one that fits and plays fastest is returned."""
        deadline = time.monotonic() + time_limit
        found = self._rounds(budget, deadline)
        if found is None:
            remaining = max(deadline - time.monotonic(), 1.0)
            planned, needed, proven, solution = self._smallest(remaining)
            if needed > budget:
                raise NoPlanFits(budget, needed, proven)
            # no round's plan fitted, this one does: no bound then but the trivial one, and
            # its time in the program's model computed here (that search weighed bytes)
            timed = dataclasses.replace(
                solution, seconds=milp.added_seconds(self.problem, solution.taken)
            )
            report = self._report(budget, needed, planned, timed, 0.0, 0.0, ROUNDS)
            found = planned, report
        planned, report = self._or_faster_heuristic(budget, *found[:2])
        # a plan found for another budget that fits this one and plays faster (the program's
        # model is not the played time): so a larger budget is never slower, in one planner
        for earlier, known in self._found:
            if known.pool_bytes <= budget and known.predicted_seconds < report.predicted_seconds:
                planned = earlier
                report = dataclasses.replace(  # (the program's figures are this budget's)
                    known,
                    budget=budget,
                    lower_bound_seconds=report.lower_bound_seconds,
                    gap=report.gap,
                    status=report.status,
                    solve_seconds=report.solve_seconds,
                )
        self._found.append((planned, report))
        return planned, report

    def _or_faster_heuristic(self, budget, planned, report):
        """(Plan, OptimalPlan): the solver's plan, or a heuristic's that fits `budget` and
        is faster by the same cost model. The program models a copy as hidden by the one
        layer it overlaps; the engine's copy stream (and costs.plan_seconds) lets it run on
        under the layers after, and vDNN's window fetches tensors earlier or later than the
        program's two rules: at some budgets a heuristic's plan is the faster."""
        fitting = [h for h in self.heuristic_plans() if h[2] <= budget]
        if not fitting:
            return planned, report
        name, plan, needed, seconds = min(fitting, key=lambda h: h[3])
        if seconds >= report.predicted_seconds:
            return planned, report
        rows = self._rows_of(plan)
        rebuilt = frozenset(k for k, r in zip(self.tensors, rows) if r["decision"] == "recompute")
        moved = tuple(k for k, r in zip(self.tensors, rows) if r["decision"] == "offload")
        return plan, dataclasses.replace(
            report,
            decisions=Decisions(rebuilt, moved),
            pool_bytes=needed,
            predicted_seconds=seconds,
            rows=tuple(rows),
            source=name,
        )

    def heuristic_plans(self):
        """[(name, Plan, pool bytes, cost model seconds)] of every pair of HEURISTICS, made
        once per planner."""
        if self._heuristics is None:
            self._heuristics = []
            for recompute, offload in HEURISTICS:
                plan = self.make_heuristic(recompute, offload)
                needed = pool_bytes_needed(plan, self.device, self.joined)
                name = heuristic_name(recompute, offload)
                self._heuristics.append((name, plan, needed, self.seconds(plan)))
        return self._heuristics

    def _rows_of(self, plan):
        """memory_decisions()'s rows of a heuristic's plan: what its passes did to each tensor
        of the problem (where it is off the device is the policy's, not given: [])."""
        moved = {id(n.reads[0].block) for n in plan.nodes if n.stream == "copy"}
        rebuilt = {s.block.desc for n in plan.nodes if n.phase == "recompute" for s in n.writes}
        costs = {(c.tensor, c.decision): c for c in self.problem.choices}
        rows = []
        for index, key in enumerate(self.tensors):
            block = self.liveness_blocks[key]
            decision = "keep"
            if key in moved:
                decision = "offload"
            elif f"{block.desc} (recomputed)" in rebuilt:
                decision = "recompute"
            choice = costs.get((index, decision))
            seconds = 0.0 if choice is None else choice.seconds + sum(t for _, t in choice.copies)
            row = {"tensor": block.desc, "bytes": block.nbytes, "decision": decision}
            rows.append({**row, "off_device": [], "seconds": seconds})
        return rows

    def _rounds(self, budget, deadline, problem=None):
        """plan()'s rounds: (Plan, OptimalPlan, milp.Solution) of the first solution of
        `problem` (default: the step's) whose layout fits `budget`, or None."""
        cap, spent, bound = budget - self.outside, 0.0, None
        for rounds in range(1, ROUNDS + 1):
            remaining = max(deadline - time.monotonic(), 1.0)
            try:
                solution = milp.fastest(problem or self.problem, cap, remaining)
            except milp.Infeasible:
                return None
            spent += solution.solve_seconds
            # the first round's bound holds for the budget; later rounds only tighten the cap
            bound = solution.bound if bound is None else bound
            planned = self.make(self.decisions(solution.taken))
            needed = pool_bytes_needed(planned, self.device, self.joined)
            if needed <= budget:
                report = self._report(budget, needed, planned, solution, bound, spent, rounds)
                return planned, report, solution
            # the layout needs more than the live bytes (fragmentation): ask for fewer live
            # bytes than this solution's, by the overshoot
            cap = min(cap, solution.peak) - max(needed - budget, self.device.pool.alignment)
        return None

    def smallest(self, time_limit=TIME_LIMIT):
        """(Plan, the pool bytes it needs, the solver's lower bound on the pool of any plan):
        the smallest plan found. The plan of the smallest live peak first (it depends on the
        step's bytes alone, not on the cost model); its layout may leave gaps that another
        plan avoids, so the budgets between the bound and it are then bisected (SEARCH_STEPS
        plans)."""
        return self._smallest(time_limit)[:3]

    def _smallest(self, time_limit):
        """smallest()'s answer and the Solution of least live bytes, searched once per
        planner (every budget's fallback is the same plan)."""
        if self._smallest_found is None:
            deadline = time.monotonic() + time_limit
            solution = milp.smallest_peak(self.problem, time_limit)
            planned = self.make(self.decisions(solution.taken))
            needed = pool_bytes_needed(planned, self.device, self.joined)
            # the model's bound, no higher than a plan that fits (its transient extras are
            # counted at their largest: the bound is on the model, the layout may hold less)
            low = proven = min(self.outside + int(solution.bound), needed)
            # the search weighs bytes, not times: the same plans on every device
            by_bytes = dataclasses.replace(
                self.problem,
                choices=tuple(
                    dataclasses.replace(c, seconds=c.nbytes * 1e-12, copies=())
                    for c in self.problem.choices
                ),
            )
            for _ in range(SEARCH_STEPS):
                middle = (low + needed) // 2
                if middle <= low or time.monotonic() > deadline:
                    break
                found = self._rounds(middle, deadline, by_bytes)
                if found is None:
                    low = middle
                else:
                    planned, needed, solution = found[0], found[1].pool_bytes, found[2]
            self._smallest_found = planned, needed, min(proven, needed), solution
        return self._smallest_found

    def make(self, decisions):
        """The Plan of this step with `decisions`."""
        return make_plan(self.recorded, self.kinds, self.device, self.sequential, "", "", decisions)

    def make_heuristic(self, recompute, offload):
        """The Plan of this step with the policies (what memory="heuristic" makes)."""
        return make_plan(
            self.recorded, self.kinds, self.device, self.sequential, recompute, offload
        )

    def decisions(self, taken):
        rebuilt, moved, on_demand = set(), [], set()
        for i in taken:
            choice = self.problem.choices[i]
            key = self.tensors[choice.tensor]
            if choice.decision == "recompute":
                rebuilt.add(key)
            else:
                moved.append(key)
                if choice.decision == ON_DEMAND:
                    on_demand.add(key)
        return Decisions(frozenset(rebuilt), tuple(moved), frozenset(on_demand))

    def seconds(self, planned):
        """The cost model's time of a plan of this step (costs.plan_seconds)."""
        return plan_seconds(planned, self.costs, self.recorded)

    def _report(self, budget, needed, planned, solution, bound, spent, rounds):
        """The OptimalPlan of `planned` (made from `solution`; `bound`: the solver's bound on
        the time added at this budget)."""
        step = self.costs.step_seconds
        predicted = self.seconds(planned)
        # the program's figures, in its own model of the step (milp.py): its plan's time and
        # the bound it proved; the played time (predicted) may differ either way
        lower = step + bound
        value = step + max(solution.seconds, bound)
        gap = (value - lower) / value if value > 0 else 0.0
        rows = []
        taken = {self.problem.choices[i].tensor: self.problem.choices[i] for i in solution.taken}
        blocks = self.liveness_blocks
        for index, key in enumerate(self.tensors):
            choice = taken.get(index)
            block = blocks[key]
            seconds = 0.0
            if choice is not None:
                seconds = choice.seconds + sum(s for _, s in choice.copies)
            rows.append(
                {
                    "tensor": block.desc,
                    "bytes": block.nbytes,
                    "decision": "keep" if choice is None else choice.decision,
                    "off_device": [list(f) for f in choice.frees] if choice else [],
                    "seconds": seconds,
                }
            )
        return OptimalPlan(
            self.decisions(solution.taken),
            budget,
            needed,
            step,
            predicted,
            lower,
            gap,
            solution.status,
            spent,
            rounds,
            self.costs.source,
            tuple(rows),
        )

    @functools.cached_property
    def liveness_blocks(self):
        """{block id: block} of the recorded step."""
        return block_kinds(self.recorded)[1]


def heuristic_name(recompute, offload):
    """A heuristic's name: "liveness", "recompute speed", "offload conv", "recompute memory +
    offload all"..."""
    parts = [f"recompute {recompute}"] * (recompute != "none")
    parts += [f"offload {offload}"] * (offload != "none")
    return " + ".join(parts) or "liveness"
