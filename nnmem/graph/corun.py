"""Co-running operations (Strategies 3 and 4 of Runtime Concurrency Control and Operation
Scheduling, section IV): independent ready operations run at the same time on worker threads,
each with a thread count that fits the idle cores.

Which operations may run at the same time. The recorded dependencies (schedule.py) are not
enough: the static plan gives two tensors the same bytes when, in the replay order, one is
dead before the other is born -- two operations independent in the graph may then write the
same bytes. MXNet's design note names the two cures: plan with such pairs as conflicting, or
add the implicit dependencies. ``hazards`` does the second: it walks the replay order and
orders every two calls that touch overlapping bytes of the pool, at least one of them writing
(read after write, write after read, write after write). Co-running then only ever overlaps
calls that share no written byte, so the numbers are bit-identical to the serial replay
(every kernel's result is independent of its thread count: kernels/cpu says why).

Strategy 3, at every moment some cores are idle: for each ready operation, take the three
thread counts with the shortest predicted times (hill_climbing.py); a count fits if it is at
most the idle cores and its predicted time is no longer than the longest running operation's
(the paper's test that co-running does not lower the throughput); the fewest threads that fit
win, leaving cores for another operation; a count more than 2 away from the operation type's
count (Strategy 2) is replaced by that count. If nothing fits, the most expensive ready
operation waits for cores and then runs alone with its Strategy 2 count.

Strategy 4, on a machine with hyper-threads (SMT): while the physical cores are all busy,
the smallest ready operations (shortest predicted time with one thread) run on the sibling
hardware threads, one thread each. Without SMT there are no siblings to share, and nothing
changes (``smt_threads_per_core`` tells).
"""

import queue
import threading
import time

import numba

__all__ = ["CoRunner", "hazards", "smt_threads_per_core"]

SMT_SIBLINGS = "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"
DRIFT = 2  # the paper's "2": how far a co-run count may stray from the type's count


def smt_threads_per_core():
    """(hardware threads per core, where that was read); 1 where it cannot be read."""
    try:
        with open(SMT_SIBLINGS) as f:
            text = f.read().strip()
    except OSError:
        return 1, "unknown (no " + SMT_SIBLINGS + ")"
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi) - int(lo) + 1 if hi else 1
    return count, SMT_SIBLINGS


def _ranges(specs):
    """The pool byte ranges (start, end) of the specs' blocks, none empty."""
    out = []
    for spec in specs:
        block = spec.block
        if block.offset is not None and block.nbytes:
            out.append((block.offset, block.offset + block.nbytes))
    return out


def hazards(nodes, positions, predecessors):
    """For the calls nodes[positions[0]], nodes[positions[1]], ... (replay order): the set of
    earlier positions each must wait for: the recorded `predecessors` (node indices) plus
    every earlier call that touches overlapping bytes, one of the two writing."""
    index_at = {i: p for p, i in enumerate(positions)}
    touched = [(_ranges(nodes[i].reads), _ranges(nodes[i].writes)) for i in positions]
    distinct = sorted({r for reads, writes in touched for r in reads + writes})
    overlapping = {r: [] for r in distinct}  # range -> every range sharing a byte with it
    active = []
    for r in distinct:  # sweep by start: the ranges still open overlap r
        active = [q for q in active if q[1] > r[0]]
        for q in active:
            overlapping[q].append(r)
            overlapping[r].append(q)
        overlapping[r].append(r)
        active.append(r)
    last_writer, readers = {}, {}
    waits = []
    for p, (reads, writes) in enumerate(touched):
        before = {index_at[j] for j in predecessors[positions[p]] if j in index_at}
        for r in reads:
            for q in overlapping[r]:
                if q in last_writer:
                    before.add(last_writer[q])
        for r in writes:
            for q in overlapping[r]:
                if q in last_writer:
                    before.add(last_writer[q])
                before.update(readers.get(q, ()))
        for r in reads:
            readers.setdefault(r, []).append(p)
        for r in writes:
            last_writer[r] = p
            readers[r] = []
        before.discard(p)
        waits.append(before)
    return waits


class CoRunner:
    """Runs a list of calls on worker threads, co-running independent ones.

    calls[p] = (name, fn, arrays); waits[p]: positions it must follow; plan[p] = (type count,
    candidate counts, predicted seconds at each count (a function)). `smt` enables Strategy 4.
    A list of waits is read once (who follows whom is kept for the next run with the same
    list): give a new list for a new plan, never change one in place."""

    def __init__(self, cores, smt=1):
        self.cores, self.smt = cores, smt
        self.trace = None  # a list: (name, threads, lane, start, end) of every call appended
        self.corun_starts = 0  # calls of the last run started while another was running
        self._tasks = queue.SimpleQueue()
        self._done = queue.SimpleQueue()
        self._workers = []
        self._lock = threading.Lock()
        self._waits, self._followers = None, None  # the last run's waits, and who follows whom

    def _ensure_workers(self, count):
        with self._lock:
            while len(self._workers) < count:
                lane = len(self._workers)
                worker = threading.Thread(
                    target=self._work, args=(lane,), name=f"nnmem co-run {lane}", daemon=True
                )
                worker.start()
                self._workers.append(worker)

    def _work(self, lane):
        current = None
        while True:
            p, fn, arrays, threads = self._tasks.get()
            start = time.perf_counter()
            try:
                if threads != current:
                    numba.set_num_threads(threads)  # this worker thread's count only
                    current = threads
                fn(*arrays)
                error = None
            except BaseException as e:  # handed to the scheduling thread, which raises it
                error = e
            self._done.put((p, lane, threads, start, time.perf_counter(), error))

    def run(self, calls, waits, plan):
        """Run every call once, each after the calls it waits for; raise the first failure
        after every started call has ended.

        A call that runs alone -- nothing running beside it, and nothing else ready or no core
        or hyper-thread left beside it -- runs on this thread: handing it to a worker would
        only add the hand-off (tens of microseconds, as long as a small kernel), and nothing
        could start before it ends anyway. Its trace lane is -1. Where the graph is a chain
        (most of a ResNet), every call runs so."""
        n = len(calls)
        remaining = [len(w) for w in waits]
        followers = self._followers_of(waits)
        ready = [p for p in range(n) if remaining[p] == 0]
        running = {}  # position -> (threads, on hyper-threads?, predicted seconds)
        busy = [0, 0]  # physical cores, then sibling hardware threads, in use
        self._ensure_workers(self.cores * self.smt)
        finished, errors = 0, []
        self.corun_starts = 0

        def complete(p, lane, threads, start, end, failure):
            nonlocal finished
            finished += 1
            if self.trace is not None:
                self.trace.append((calls[p][0], threads, lane, start, end))
            if failure is not None:
                errors.append(failure)
                return
            for q in followers[p]:
                remaining[q] -= 1
                if remaining[q] == 0:
                    ready.append(q)

        try:
            while finished < n:
                while ready and not errors:
                    choice = self._choose(ready, running, busy[0], busy[1], plan)
                    if choice is None:
                        break
                    p, threads, on_siblings = choice
                    ready.remove(p)
                    _, fn, arrays = calls[p]
                    if not running and (not ready or threads >= self.cores and self.smt == 1):
                        complete(p, -1, threads, *self._run_here(fn, arrays, threads))
                        continue
                    self.corun_starts += bool(running)
                    running[p] = (threads, on_siblings, plan[p][2](threads))
                    busy[on_siblings] += threads
                    self._tasks.put((p, fn, arrays, threads))
                if not running:
                    break  # done, or an error stopped the scheduling and nothing is left running
                p, lane, threads, start, end, failure = self._done.get()
                held, on_siblings, _ = running.pop(p)
                busy[on_siblings] -= held
                complete(p, lane, threads, start, end, failure)
        except BaseException:
            # a Ctrl-C while waiting: the running calls still write their bytes; let them end
            while running:
                p, *_ = self._done.get()
                running.pop(p, None)
            raise
        if errors:
            raise errors[0]
        if finished < n:
            raise RuntimeError("co-running: calls left that wait for each other; a bug in nnmem")

    def _followers_of(self, waits):
        """followers[q]: the positions that wait for q. Built once per list of waits (a step
        replays the same one every time: rebuilding it cost O(edges) of Python per step)."""
        if waits is not self._waits:
            followers = [[] for _ in waits]
            for p, before in enumerate(waits):
                for q in before:
                    followers[q].append(p)
            self._waits, self._followers = waits, followers
        return self._followers

    @staticmethod
    def _run_here(fn, arrays, threads):
        """(start, end, failure) of fn(*arrays) run on this thread with `threads` threads (the
        caller's count is put back by concurrency.py when the step's calls are done)."""
        start = time.perf_counter()
        try:
            numba.set_num_threads(threads)
            fn(*arrays)
            failure = None
        except Exception as e:  # as a worker would report it; a Ctrl-C goes up at once
            failure = e
        return start, time.perf_counter(), failure

    def _choose(self, ready, running, busy, siblings_busy, plan):
        """(position, threads, on hyper-threads) of the next call to start, or None."""
        idle = self.cores - busy
        if not running:  # nothing to co-run with: the most expensive ready call, alone
            p = max(ready, key=lambda q: (plan[q][2](plan[q][0]), -q))
            return p, min(plan[p][0], self.cores), False
        horizon = max(seconds for _, _, seconds in running.values())
        if idle > 0:
            best = None
            for p in ready:
                type_count, candidates, predict = plan[p]
                for threads in sorted(candidates):
                    if abs(threads - type_count) > DRIFT:
                        threads = type_count
                    if threads <= idle and predict(threads) <= horizon:
                        if best is None or threads < best[1]:
                            best = (p, threads, False)
                        break
            if best is not None:
                return best
        if self.smt > 1 and idle <= 0:  # Strategy 4: the smallest call on a sibling thread
            free = self.cores * (self.smt - 1) - siblings_busy
            if free > 0:
                p = min(ready, key=lambda q: (plan[q][2](1), q))
                if plan[p][2](1) <= horizon:
                    return p, 1, True
        return None
