"""Runtime concurrency control on a compiled step (the CPU device): how many threads each
operation runs with, and which operations run at the same time.

``model.compile(..., use_graph=True, concurrency=POLICY)``:

=========  =============================================================================
"off"      every operation with all the cores, one after another (the default)
"1"        Strategy 1: each operation with the count hill climbing found best for it
"1-2"      Strategy 2 too: one count per operation type (from its most expensive
           instance), so that the count does not change from one instance to the next
"1-3"      Strategy 3 too: independent ready operations co-run on worker threads
           (compute phase; the commit phase stays serial), corun.py
"1-4"      Strategy 4 too: small operations on the hyper-threads of busy cores, where the
           machine has SMT
"auto"     "1-4"
=========  =============================================================================

The first replays after recording are profiling steps (hill_climbing.py): they run serially,
each operation with the count its climb tries next, and time every call. When every climb
has ended, the chosen counts are fixed and the policy's strategies apply. The profile, its cost
and the choices are in ``step.concurrency_profile()``.

Every operation's kernels take their thread count from ``numba.set_num_threads`` on the thread
that launches them (the GEMMs too: kernels/cpu/gemm.py), a setting of that thread only; the
replay puts the caller's count back when it ends. Co-running needs a threading layer that
takes launches from several threads at once (TBB or OpenMP, not workqueue); on workqueue,
strategies 3-4 are refused with the reason.
"""

import time

import numba

from nnmem.graph.corun import CoRunner, hazards, smt_threads_per_core
from nnmem.graph.hill_climbing import HillClimbing
from nnmem.graph.schedule import dependencies

__all__ = ["POLICIES", "Concurrency", "check_policy"]

POLICIES = {"off": (), "1": (1,), "1-2": (1, 2), "1-3": (1, 2, 3), "1-4": (1, 2, 3, 4)}
POLICIES["auto"] = POLICIES["1-4"]


def check_policy(policy, device=None):
    """The strategies of a concurrency policy; a one-line ValueError for anything else, and for
    co-running on a device whose threads cannot launch kernels from two threads at once."""
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ValueError(
            f"concurrency={policy!r}: choose one of {sorted(POLICIES)} ('auto' is '1-4'; "
            "'off' runs every operation with all the cores, serially)"
        )
    if 3 in POLICIES[policy] and device is not None and not device.can_corun():
        layer = device.threading_layer()
        raise ValueError(
            f"concurrency={policy!r} co-runs operations, which Numba's {layer!r} threading "
            "layer cannot (it refuses launches from two threads at once): pip install "
            "tbb, or use concurrency='1-2'"
        )
    return POLICIES[policy]


def op_type(node):
    """An operation's type: operator, phase and kernel function ("Conv2d backward fastest")."""
    fn = getattr(node.fn, "__qualname__", type(node.fn).__name__)
    fn = fn.replace(".<locals>", "").replace("<lambda>", "kernel").split(".")[-1]
    return f"{node.name.split(':')[-1]} {node.phase} {fn}"


def op_key(node):
    """An operation's type and the shapes of its arrays: the unit hill climbing times."""
    return op_type(node), tuple(spec.shape for spec in node.writes + node.reads)


class Concurrency:
    """The concurrency control of one compiled step (see the module's docstring)."""

    def __init__(self, policy, device, cores=None, interval=None, repeats=2, patience=2):
        self.policy, self.strategies = policy, check_policy(policy, device)
        self.cores = cores or numba.config.NUMBA_NUM_THREADS
        self.smt, self.smt_source = smt_threads_per_core()
        self.interval = interval or max(1, self.cores // 8)
        self.repeats, self.patience = repeats, patience
        self.layer = device.threading_layer()
        self.climbing = None
        self.profiling_seconds = 0.0
        self.runner = CoRunner(self.cores, self.smt if 4 in self.strategies else 1)
        self._chosen = None  # (counts, co-run choices) once chosen: see _choices
        self._step_seconds = {}
        self._step_start = None

    # -- binding to the step's calls --------------------------------------------------------
    def bind(self, nodes, order, split):
        """Read the step's calls (node `order[p]` is call p; calls before `split` compute):
        their keys, and the waits that make co-running safe. A profile of the same keys is
        kept (a re-placement moves bytes, not operations)."""
        self.keys = [op_key(nodes[i]) for i in order]
        self.types = [k[0] for k in self.keys]
        if self.climbing is None or set(self.climbing.climbs) != set(self.keys):
            self.climbing = HillClimbing(
                self.keys, self.cores, self.interval, self.repeats, self.patience
            )
            self.profiling_seconds = 0.0
        self.split = split
        self._chosen = None
        self.waits = None
        if 3 in self.strategies:
            self.waits = hazards(nodes, order[:split], dependencies(nodes))

    @property
    def profiling(self):
        return not self.climbing.done

    # -- the choices --------------------------------------------------------------------------
    def type_counts(self):
        """Strategy 2: {operation type: the best count of its most expensive instance}."""
        heaviest = {}
        for key, climb in self.climbing.climbs.items():
            seconds = climb.tried[climb.best] * climb.instances
            if key[0] not in heaviest or seconds > heaviest[key[0]][0]:
                heaviest[key[0]] = (seconds, climb.best)
        return {t: best for t, (_, best) in heaviest.items()}

    def counts(self):
        """The thread count of every call, by the policy's strategies."""
        if 2 in self.strategies:
            by_type = self.type_counts()
            return [by_type[t] for t in self.types]
        return [self.climbing.climbs[k].best for k in self.keys]

    def _choices(self):
        """(counts, co-run choices), chosen once from the finished profile: per call its count,
        and (count, its three best candidates, its predictor) for the co-runner."""
        if self._chosen is None:
            counts = self.counts()
            corun = []
            for p, key in enumerate(self.keys):
                climb = self.climbing.climbs[key]
                corun.append((counts[p], climb.candidates(), climb.predict))
            self._chosen = (counts, corun)
        return self._chosen

    # -- running ------------------------------------------------------------------------------
    def begin_step(self):
        self._step_seconds = {}
        self._step_start = time.perf_counter()

    def run(self, calls, start):
        """Run calls[...] (positions start, start+1, ... of the step) with the policy's counts."""
        caller = numba.get_num_threads()
        try:
            if self.profiling:
                self._profile(calls, start)
            elif 3 in self.strategies and start < self.split:
                self._corun(calls, start)
            else:
                self._serial(calls, start)
        finally:
            numba.set_num_threads(caller)

    def end_step(self):
        """After a whole step: a profiling step's times advance the climbs."""
        if self.profiling and self._step_start is not None:
            self.profiling_seconds += time.perf_counter() - self._step_start
            self.climbing.step_done(self._step_seconds)
        self._step_start = None

    def _profile(self, calls, start):
        current = None
        for p, (_, fn, arrays) in enumerate(calls, start):
            key = self.keys[p]
            threads = self.climbing.threads(key)
            if threads != current:
                numba.set_num_threads(threads)
                current = threads
            t0 = time.perf_counter()
            fn(*arrays)
            self._step_seconds[key] = self._step_seconds.get(key, 0.0) + (time.perf_counter() - t0)

    def _serial(self, calls, start):
        counts, current = self._choices()[0], None
        for p, (_, fn, arrays) in enumerate(calls, start):
            if counts[p] != current:
                numba.set_num_threads(counts[p])
                current = counts[p]
            fn(*arrays)

    def _corun(self, calls, start):
        """The compute phase (positions 0 ... split - 1: the positions the waits count in)."""
        assert start == 0 and len(calls) == self.split, "co-running is for the compute phase"
        self.runner.run(calls, self.waits, self._choices()[1])

    def choose_again(self):
        """Choose the counts again from the profile as it is now, after a learner edited it:
        for the course (tutorial 07); nnmem itself chooses once, when profiling ends."""
        self._chosen = None

    # -- what a learner reads -----------------------------------------------------------------
    def trace(self, on=True):
        """Record every co-run call of the next replays: (name, threads, worker, start, end),
        seconds from the first call's start, in ``lanes()`` (a Gantt chart's bars)."""
        self.runner.trace = [] if on else None

    def lanes(self):
        """The traced calls (see trace()), since trace() was called."""
        calls = self.runner.trace or []
        origin = min((start for *_, start, _ in calls), default=0.0)
        return [(n, t, lane, s - origin, e - origin) for n, t, lane, s, e in calls]

    def profile(self):
        """The profile as plain data: per key, the counts tried and their seconds, the best
        count, the type's count (Strategy 2), the instances per step; and what it cost."""
        by_type = self.type_counts() if self.climbing.done else {}
        ops = {}
        for (kind, shapes), climb in self.climbing.climbs.items():
            name = f"{kind} {' '.join('x'.join(map(str, s)) for s in shapes)}"
            ops[name] = {
                "type": kind,
                "tried": dict(sorted(climb.tried.items())),
                "best": climb.best if climb.tried else None,
                "type_count": by_type.get(kind),
                "instances": climb.instances,
                "done": climb.done,
            }
        return {
            "policy": self.policy,
            "strategies": list(self.strategies),
            "cores": self.cores,
            "smt_threads_per_core": self.smt,
            "smt_source": self.smt_source,
            "strategy_4_active": 4 in self.strategies and self.smt > 1,
            "threading_layer": self.layer,
            "interval": self.interval,
            "repeats": self.repeats,
            "patience": self.patience,
            "profiling_done": self.climbing.done,
            "profiling_steps": self.climbing.steps,
            "profiling_seconds": self.profiling_seconds,
            "corun_starts": self.runner.corun_starts,  # of the last co-running step
            "operations": ops,
        }
