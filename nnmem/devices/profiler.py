"""Timing kernels: SINGA's time profile of a device's steps, and the fastest run of one kernel.

SINGA's profiler (``SetVerbosity``, ``SetSkipIteration``, ``PrintTimeProfiling`` on a device)
adds up, per operation, the seconds its kernel calls took in the profiled steps, eager and
replayed alike; ``table`` prints them per step, most expensive first. ``fastest_run`` is the
timer Conv2d's "auto" workspace uses to pick an algorithm (Device.time_kernel).

Both wait for the device before and after reading the clock (the ``sync`` they are given): on a
GPU a kernel function only queues kernels, and its return says nothing about when they ran.
"""

import time
from collections import defaultdict


class Profiler:
    """A device's per-operation kernel times, while ``verbosity`` is on.

    verbosity       -- 0 off, 1 per operation type, 2 per operation (layer:op).
    skip_iterations -- the first steps (JIT compilation, recording) are left out.
    seconds         -- operation name -> [seconds, calls], over the profiled steps.
    """

    def __init__(self, sync):
        self.sync = sync  # waits until every kernel queued on the device has run
        self.verbosity = 0
        self.skip_iterations = 0
        self.seconds = defaultdict(lambda: [0.0, 0])

    def is_timing(self, iteration):
        """Are the kernel calls of step number `iteration` (0 for the first) timed?"""
        return bool(self.verbosity) and iteration >= self.skip_iterations

    def run(self, name, fn, arrays):
        """Call ``fn(*arrays)`` and add the seconds it took to operation `name`."""
        self.sync()
        start = time.perf_counter()
        fn(*arrays)
        self.sync()
        entry = self.seconds[name]
        entry[0] += time.perf_counter() - start
        entry[1] += 1

    def table(self, iterations):
        """The profile as text: milliseconds and calls per profiled step (of `iterations`
        steps in all), and each operation's share of the time, most expensive first."""
        rows = defaultdict(lambda: [0.0, 0])
        for name, (seconds, calls) in self.seconds.items():
            key = name.split(":")[-1] if self.verbosity == 1 else name
            rows[key][0] += seconds
            rows[key][1] += calls
        total = sum(seconds for seconds, _ in rows.values()) or 1.0
        steps = max(iterations - self.skip_iterations, 1)
        lines = [
            f"time profile over {steps} step(s), per step:",
            f"{'operation':40} {'ms/step':>9} {'calls/step':>10} {'share':>6}",
        ]
        for key, (seconds, calls) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
            lines.append(
                f"{key[:40]:40} {1e3 * seconds / steps:9.3f} {calls / steps:10.1f} "
                f"{seconds / total:6.1%}"
            )
        return "\n".join(lines)


def fastest_run(fn, arrays, sync, repeats=3):
    """Seconds one ``fn(*arrays)`` takes: run once (it may compile), then the fastest of
    `repeats` runs, each timed between two ``sync()`` calls (the minimum: noise from a busy
    machine only ever adds time)."""
    fn(*arrays)
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn(*arrays)
        sync()
        best = min(best, time.perf_counter() - start)
    return best
