"""Timing kernels: SINGA's time profile of a device's steps, and the fastest run of one kernel.

SINGA's profiler (``SetVerbosity``, ``SetSkipIteration``, ``PrintTimeProfiling`` on a device)
adds up, per operation, the seconds its kernel calls took in the profiled steps, eager and
replayed alike; ``table`` prints them per step, most expensive first. ``fastest_run`` is the
timer Conv2d's "auto" workspace uses to pick an algorithm (Device.time_kernel).

The arithmetic of a profile. A step is profiled when the profiler is on and the device's
iteration count has reached ``skip_iterations`` (SINGA's rule: the first steps compile and
record). Its kernel times are added only once the step returns, with the step's own wall
time, and the per-step figures divide by the number of steps profiled, nothing else. The rows
then add up to the step: the kernels, plus a row for the time between them (Python's dispatch,
the allocator, the autograd walk), which is the profiled steps' time less their kernels'.
Kernel calls outside any step (an eager operation a script runs on its own) are listed apart.

Both timers wait for the device before and after reading the clock (the ``sync`` they are
given): on a GPU a kernel function only queues kernels, and its return says nothing about when
they ran.
"""

import contextlib
import threading
import time
from collections import defaultdict

from nnmem.devices.flops import kernel_flops

BETWEEN = "(between kernels)"


def _rows():
    return defaultdict(lambda: [0.0, 0, 0.0])  # name -> [seconds, calls, flops]


class Profiler:
    """A device's per-operation kernel times, while ``verbosity`` is on.

    verbosity       -- 0 off, 1 per operation type, 2 per operation (layer:op).
    skip_iterations -- steps numbered below it (the first ones: JIT compilation, recording) are
                       not profiled.
    seconds         -- operation name -> [seconds, calls, flops], over the profiled steps.
    steps           -- how many steps were profiled; step_seconds: their wall time.
    outside         -- the same as `seconds`, for kernel calls outside any step.
    """

    def __init__(self, sync):
        self.sync = sync  # waits until every kernel queued on the device has run
        self.verbosity = 0
        self.skip_iterations = 0
        self.seconds, self.outside = _rows(), _rows()
        self.steps, self.step_seconds = 0, 0.0
        self._step = None  # the rows of the step being profiled, added when it returns
        self._lock = threading.Lock()  # co-running operations time kernels from several threads

    def is_timing(self, iteration):
        """Are the kernel calls of step number `iteration` (0 for the first) timed?"""
        return bool(self.verbosity) and iteration >= self.skip_iterations

    @contextlib.contextmanager
    def profiling_step(self, iteration):
        """Around one (outermost) step: when it is profiled, its kernel times and its wall time
        count once it returns; a step that fails adds nothing (it is no iteration)."""
        if not self.is_timing(iteration) or self._step is not None:
            yield
            return
        self._step = _rows()
        self.sync()
        start = time.perf_counter()
        try:
            yield
            self.sync()
            with self._lock:
                self.step_seconds += time.perf_counter() - start
                self.steps += 1
                for name, (seconds, calls, flops) in self._step.items():
                    _add(self.seconds[name], seconds, calls, flops)
        finally:
            self._step = None

    def run(self, name, fn, arrays):
        """Call ``fn(*arrays)`` and add the seconds it took to operation `name`."""
        self.sync()
        start = time.perf_counter()
        fn(*arrays)
        self.sync()
        seconds = time.perf_counter() - start
        flops = kernel_flops(name, [a.shape for a in arrays])
        with self._lock:
            rows = self.outside if self._step is None else self._step
            _add(rows[name], seconds, 1, flops)

    def table(self):
        """The profile as text: per profiled step, milliseconds, calls, share of the step and
        GFLOP/s of each operation, most expensive first, then the time between kernels; the
        rows add up to the step's time."""
        lines = []
        if self.steps:
            rows = self._merged(self.seconds)
            kernels = sum(seconds for seconds, _, _ in rows.values())
            rows[BETWEEN] = [max(self.step_seconds - kernels, 0.0), 0, 0.0]
            total = max(self.step_seconds, kernels)
            flops = sum(f for _, _, f in rows.values())
            lines += [
                f"time profile over {self.steps} profiled step(s): "
                f"{1e3 * total / self.steps:.3f} ms per step, {_rate(flops, total)} GFLOP/s",
                *_format(rows, self.steps, total, "ms/step", "calls/step"),
            ]
        else:
            lines.append("time profile: no step profiled (SetVerbosity, then run steps)")
        if self.outside:
            rows = self._merged(self.outside)
            total = sum(seconds for seconds, _, _ in rows.values())
            lines += ["kernel calls outside any step (not in the figures above):"]
            lines += _format(rows, 1, total, "ms", "calls")
        return "\n".join(lines)

    def _merged(self, seconds):
        """Rows per operation (verbosity 2) or per operation type (1: the name after ':')."""
        rows = _rows()
        for name, (s, calls, flops) in seconds.items():
            _add(rows[name.split(":")[-1] if self.verbosity == 1 else name], s, calls, flops)
        return rows


def _add(entry, seconds, calls, flops):
    entry[0] += seconds
    entry[1] += calls
    entry[2] += flops


def _rate(flops, seconds):
    return f"{flops / seconds / 1e9:.1f}" if flops and seconds > 0 else "-"


def _format(rows, steps, total, time_head, calls_head):
    """The table's lines: a header, then one per row, most expensive first (the time between
    kernels last)."""
    lines = [f"{'operation':40} {time_head:>9} {calls_head:>10} {'share':>6} {'GFLOP/s':>8}"]
    order = sorted(rows.items(), key=lambda kv: (kv[0] == BETWEEN, -kv[1][0]))
    for key, (seconds, calls, flops) in order:
        calls_text = "" if key == BETWEEN else f"{calls / steps:.1f}"
        lines.append(
            f"{key[:40]:40} {1e3 * seconds / steps:9.3f} {calls_text:>10} "
            f"{seconds / (total or 1.0):6.1%} {_rate(flops, seconds):>8}"
        )
    return lines


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
