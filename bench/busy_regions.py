"""Parallel regions beside one busy process: how many cores a kernel really gets.

    python bench/busy_regions.py [--regions 0.3 1 10] [--seconds 1.5] [--rounds 2] [--json out.json]

Every kernel of nnmem is a parallel region: a ``prange`` loop on Numba's threads, which wake,
share the loop, and wait for each other at its end. This script times regions of pure
arithmetic (no memory traffic, so only the scheduling shows) on all of Numba's threads, quiet
and beside one CPU-bound process (bench/train.py's BusyLoop), and prints the effective cores:
a region's work in single-thread seconds over its wall time (2.0 is perfect on 2 cores). A
region of R ms is R ms on all the threads at full speed: R times the threads of one thread's.

Three ways to run the same work:
- static: Numba's default, the loop cut into one piece per thread;
- dynamic: pieces of an eighth of a thread's share (``numba.set_parallel_chunksize``), so that
  a running thread can take the pieces of one that is not running;
- threads: one Python thread per Numba thread, each running a window's worth of the same
  arithmetic in one go, never waiting for another: the scheduler's fair share, the upper bound.

It explains the busy floor (bench/README.md, "A busy machine"): a thread woken on the
core that the busy process holds starts after that process's time slice, when a short region
is over, and a region cut one piece per thread waits for it. The last line is the JSON.
"""

import argparse
import os
import sys
import threading
import time

import numba
import numpy as np
from numba import njit, prange

import nnmem  # noqa: F401  (its threading layer: TBB, kernels/cpu/threads.py)
from nnmem.cli.arguments import output_file, positive_float, positive_int

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import BusyLoop, emit_json  # noqa: E402


@njit(nogil=True, cache=True)
def spin(steps):
    """`steps` dependent multiply-adds: arithmetic only, no memory."""
    s = 0.0
    for r in range(steps):
        s = s * 0.999999 + r
    return s


@njit(parallel=True, nogil=True, cache=True)
def region(out, steps):
    """One parallel region: out.size pieces of `steps` multiply-adds each."""
    for p in prange(out.size):
        out[p] = spin(steps)


def window(run, seconds):
    """Calls of run() per second over about `seconds`."""
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        calls += 1
    return calls / (time.perf_counter() - start)


def effective_cores(way, work_s, threads, seconds, step_s):
    """Single-thread seconds of work done per wall second: regions of `work_s` seconds of
    single-thread work, run the given way ("static" or "dynamic") for about `seconds`; or,
    "threads", `seconds` of work on each thread with no region boundary."""
    if way == "threads":
        workers = [
            threading.Thread(target=spin, args=(int(seconds / step_s),)) for _ in range(threads)
        ]
        start = time.perf_counter()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        return int(seconds / step_s) * threads * step_s / (time.perf_counter() - start)
    pieces = threads if way == "static" else 8 * threads
    out = np.zeros(pieces)
    per_piece = max(1, int(work_s / step_s) // pieces)
    old = numba.set_parallel_chunksize(0 if way == "static" else 1)
    try:
        rate = window(lambda: region(out, per_piece), seconds)
    finally:
        numba.set_parallel_chunksize(old)
    return rate * per_piece * pieces * step_s


def step_seconds():
    """Seconds of one multiply-add of spin(), on one thread (best of 3)."""
    spin(10)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        spin(10**7)
        best = min(best, (time.perf_counter() - start) / 10**7)
    return best


def measure(loop, way, work_s, threads, args, step_s):
    """{"quiet": [...], "busy": [...]}: effective cores of each window, alternating."""
    seen = {"quiet": [], "busy": []}
    for _ in range(args.rounds):
        for mode in ("quiet", "busy"):
            loop.resume() if mode == "busy" else loop.pause()
            time.sleep(0.2)
            seen[mode].append(effective_cores(way, work_s, threads, args.seconds, step_s))
    return seen


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--regions",
        nargs="+",
        type=positive_float,
        default=[0.3, 1.0, 10.0],
        help="region lengths, ms on all the threads at full speed",
    )
    parser.add_argument("--seconds", type=positive_float, default=1.5, help="length of one window")
    parser.add_argument(
        "--rounds", type=positive_int, default=2, help="quiet and busy windows each"
    )
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    step_s = step_seconds()
    threads = numba.get_num_threads()
    region(np.zeros(threads), 10)  # compile, and start the threads
    print(
        f"{threads} threads ({numba.threading_layer()}), effective cores (best of "
        f"{args.rounds} windows), quiet and beside one busy process:"
    )
    print(f"  {'way':8} {'region ms':>9} {'quiet':>6} {'busy':>6}")
    loop = BusyLoop()
    rows = []
    try:
        cases = [(way, ms) for ms in args.regions for way in ("static", "dynamic")]
        for way, ms in cases + [("threads", None)]:
            seen = measure(loop, way, (ms or 0) * 1e-3 * threads, threads, args, step_s)
            row = dict(way=way, region_ms=ms, quiet=max(seen["quiet"]), busy=max(seen["busy"]))
            rows.append(row)
            label = "-" if ms is None else f"{ms:g}"
            print(f"  {way:8} {label:>9} {row['quiet']:6.2f} {row['busy']:6.2f}")
    finally:
        loop.close()
    emit_json({"threads": threads, "rows": rows}, args.json)


if __name__ == "__main__":
    main()
