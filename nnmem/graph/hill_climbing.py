"""How many threads each operation should use: the hill climbing model of Runtime Concurrency
Control and Operation Scheduling (section III-C), measured on nnmem's compiled step.

An operation's time against its thread count is a convex curve (the paper's Fig. 1, and
tutorial 07): more threads help until the work per thread is too small to pay for waking
them, then they cost. Hill climbing finds the bottom in a few training steps:

    step 1: every operation runs with 1 thread; its time is measured;
    step s: it runs with 1 + (s-1)*interval threads (at most all the cores);
    it stops when the time rose (the best is the fastest tried), or when it reached all the
    cores.

Two changes to the paper's rule, both measured on a 16-core Xeon (bench/concurrency.py): the
curves of small operations there are convex only roughly -- Inception's largest convolution
took 3.9 ms on 8 threads, 4.4 on 12 and 2.8 on 16 (perhaps because work cut into 16 chunks
takes two rounds on 8 threads and on 12), and one sample in a few is slow by chance -- so the
first rise stopped climbs at 5-9 threads where 16 was fastest, and Strategies 1-2 lost 10-29%
against all the cores for every operation (replayed on a full sweep of thread counts:
Inception 84 ms of operations per step against 69 on all the cores; with both changes, 70).
- ``patience``: the climb stops only after that many counts in a row no faster than the best
  so far (the paper's rule is patience=1; the default, 2, steps over one bump);
- a climb that stopped short of all the cores tries all the cores last: the count of the
  uniform baseline, so that the choice is never slower than the baseline as profiled.

Operations are told apart by a key: their type (the operator and which of its kernels, e.g.
``Conv2d/backward_data``) and the shapes of their arrays, so that every instance of a key in a
step is timed together (the mean of the instances). ``repeats`` steps per count, keeping the
fastest, damp the noise of a shared machine.

Counts that were not tried are predicted by linear interpolation between the two nearest
tried counts (beyond the last tried count: that count's time); the paper reports 95% accuracy
for an interval of 4 on 68 cores.
"""

__all__ = ["Climb", "HillClimbing"]


class Climb:
    """One key's hill climb: the counts tried, their best times, and the choice."""

    def __init__(self, cores, interval, repeats, patience=2):
        self.cores, self.interval, self.repeats = cores, interval, repeats
        self.patience = patience
        self.tried = {}  # thread count -> fastest mean seconds per instance
        self.threads = 1  # the count the next profiling step runs with
        self.samples = 0  # steps measured at that count
        self.done = False
        self.instances = 0  # instances of the key in one step

    def measure(self, threads, seconds):
        """One profiling step's mean time of the key's instances at `threads`."""
        best = self.tried.get(threads)
        self.tried[threads] = seconds if best is None else min(best, seconds)

    def advance(self):
        """After a profiling step: the next count to try, or done."""
        self.samples += 1
        if self.done or self.samples < self.repeats:
            return
        self.samples = 0
        # the counts tried after the best (they rise): those in a row no faster than it
        slower = sum(threads > self.best for threads in self.tried)
        if self.threads >= self.cores:
            self.done = True  # all the cores: the last count there is
        elif slower >= self.patience:
            self.threads = self.cores  # past the bottom: the uniform count, last
        else:
            self.threads = min(self.cores, self.threads + self.interval)

    @property
    def best(self):
        """The tried count with the shortest time."""
        return min(self.tried, key=lambda t: (self.tried[t], t))

    def predict(self, threads):
        """Seconds at `threads`: measured, or linearly interpolated between the tried counts
        around it (past the last tried count: that count's time)."""
        if threads in self.tried:
            return self.tried[threads]
        counts = sorted(self.tried)
        below = [t for t in counts if t < threads]
        above = [t for t in counts if t > threads]
        if not below:
            return self.tried[counts[0]]
        if not above:
            return self.tried[below[-1]]
        lo, hi = below[-1], above[0]
        share = (threads - lo) / (hi - lo)
        return self.tried[lo] + share * (self.tried[hi] - self.tried[lo])

    def candidates(self, limit=3):
        """The `limit` counts in 1..cores with the shortest predicted times, fastest first."""
        counts = range(1, self.cores + 1)
        return sorted(counts, key=lambda t: (self.predict(t), t))[:limit]


class HillClimbing:
    """The climbs of every key of a step, advanced together one profiling step at a time."""

    def __init__(self, keys, cores, interval=1, repeats=2, patience=2):
        for name, value, unit in (
            ("interval", interval, "threads"),
            ("repeats", repeats, "steps"),
            ("patience", patience, "counts"),
        ):
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name}={value!r}: give a whole number of {unit} >= 1")
        self.cores, self.interval, self.repeats = cores, interval, repeats
        self.climbs = {}
        for key in keys:
            climb = self.climbs.setdefault(key, Climb(cores, interval, repeats, patience))
            climb.instances += 1
        self.steps = 0  # profiling steps run

    @property
    def done(self):
        return all(c.done for c in self.climbs.values())

    def threads(self, key):
        """The count `key`'s instances run with in the current profiling step."""
        return self.climbs[key].threads

    def step_done(self, seconds_by_key):
        """Record one profiling step ({key: summed seconds of its instances}) and advance."""
        for key, seconds in seconds_by_key.items():
            climb = self.climbs[key]
            climb.measure(climb.threads, seconds / climb.instances)
        for climb in self.climbs.values():
            climb.advance()
        self.steps += 1
