"""What nnmem train says while it trains, besides its line per epoch: that Numba is compiling
kernels (CompileWatch), how fast the steps run once set up (Speed), what --concurrency chose
(concurrency_line), and the run's summary (summary_line). TrainReport ties them to the loop.

The first run on a machine compiles every kernel the model uses (Numba caches them on disk for
the next runs): its first batch takes many seconds. The user is told so once, on stderr, when a
compilation really starts, and the images/s of an epoch count only the batches that ran on a
set-up step: not the run's first (which records the step, loads or compiles the kernels and
times the convolution algorithms), nor any batch during which a kernel was compiled.
"""

import collections
import sys
import time

from numba.core import event as numba_event

from nnmem.memory import format_bytes

#: What CompileWatch says, once, when Numba starts compiling a kernel.
COMPILING = (
    "nnmem train: compiling kernels (Numba; only until they are cached on disk, usually the "
    "first run): the epoch's images/s leaves out the batches that compile"
)


class CompileWatch:
    """A context manager that listens to Numba's "numba:compile" event, which Numba sends for
    a real compilation of a CPU kernel only (not for one loaded from its disk cache).
    `compiles` counts them; at the first, say(COMPILING) runs. (numba-cuda sends no such event
    for its kernels: on a GPU, the run's first batch, where they compile, is left out of the
    speed all the same.)"""

    def __init__(self, say):
        self.say = say
        self.compiles = 0
        self._listener = _Listener(self._compiling)

    def _compiling(self):
        if self.compiles == 0:
            self.say(COMPILING)
        self.compiles += 1

    def __enter__(self):
        numba_event.register("numba:compile", self._listener)
        return self

    def __exit__(self, *exc):
        numba_event.unregister("numba:compile", self._listener)


class _Listener(numba_event.Listener):
    """Calls on_start() when an event starts."""

    def __init__(self, on_start):
        self._on_start = on_start

    def on_start(self, event):
        self._on_start()

    def on_end(self, event):
        pass


class Speed:
    """Images per second over the batches that ran on a set-up step: batch() is told each
    batch's seconds and whether kernels compiled during it; the run's first batch sets the
    step up and is never counted."""

    def __init__(self, images_per_batch):
        self.images_per_batch = images_per_batch
        self.set_up = False
        self.seconds, self.batches = 0.0, 0

    def batch(self, seconds, compiled):
        if self.set_up and not compiled:
            self.seconds += seconds
            self.batches += 1
        self.set_up = True

    def report(self):
        """The epoch's speed as its line says it; then the next epoch's count starts."""
        seconds, batches = self.seconds, self.batches
        self.seconds, self.batches = 0.0, 0
        if batches == 0:
            return "images/s not measured (no batch ran on a step already set up)"
        return f"{batches * self.images_per_batch / seconds:.0f} images/s"


class TrainReport:
    """What the training loop reports besides its epoch lines, batch by batch: the compile
    notice (on stderr, through `watch`, a CompileWatch the caller enters), the speed, and
    --concurrency's choice once profiling ends. say(text, file=None) prints a line above the
    progress bar (tqdm.write); step_of() is the compiled training step (None in eager mode),
    read after a training batch, while the model is in training mode."""

    def __init__(self, images_per_batch, concurrency, say, step_of):
        self.watch = CompileWatch(lambda text: say(text, file=sys.stderr))
        self.speed = Speed(images_per_batch)
        self.say, self.step_of = say, step_of
        self.concurrency_pending = concurrency != "off"
        self.step = None  # the training step, while concurrency's choice is awaited

    def start_batch(self):
        """Call before a batch; pass what it returns to end_batch."""
        return self.watch.compiles, time.perf_counter()

    def end_batch(self, started):
        compiles, start = started
        self.speed.batch(time.perf_counter() - start, compiled=self.watch.compiles != compiles)
        if self.concurrency_pending:
            self.step = self.step_of()
            profile = self.step.concurrency_profile()
            if profile["profiling_done"]:
                self.say(concurrency_line(profile))
                self.concurrency_pending = False

    def end_run(self):
        """After the last batch: concurrency control that never finished profiling says so."""
        if self.concurrency_pending and self.step is not None:
            self.say(concurrency_unfinished(self.step.concurrency_profile()))


def concurrency_line(profile):
    """One line on what concurrency control chose, from a compiled step's finished
    concurrency_profile(): how many of the step's operations run with each thread count, what
    profiling cost, and which of the policy's strategies apply besides the counts."""
    by_count = collections.Counter()
    for op in profile["operations"].values():
        threads = op["type_count"] if 2 in profile["strategies"] else op["best"]
        by_count[threads] += op["instances"]
    shares = ", ".join(
        f"{n} on {threads} thread{'s' if threads > 1 else ''}"
        for threads, n in sorted(by_count.items())
    )
    also = ""
    if 3 in profile["strategies"]:
        also = "; independent operations co-run"
        if profile["strategy_4_active"]:
            also += ", small ones on hyper-threads"
    return (
        f"concurrency {profile['policy']}: profiled in {profile['profiling_steps']} steps "
        f"({profile['profiling_seconds']:.2f} s); of the step's {sum(by_count.values())} "
        f"operations, {shares} (of {profile['cores']} cores){also}"
    )


def concurrency_unfinished(profile):
    """The line for a run that ended before concurrency control finished profiling."""
    return (
        f"concurrency {profile['policy']}: still profiling after {profile['profiling_steps']} "
        f"steps ({profile['profiling_seconds']:.2f} s), so nothing was chosen: train more "
        "batches (--max-batches, --epochs) to see its choice"
    )


def summary_line(seconds, accuracies, peak, saved):
    """The run's last line: the epochs trained and the seconds they took, the best test
    accuracy and its epoch (`accuracies`: {epoch number: accuracy}, in order; the first best),
    the pool's peak, and the checkpoint written (None if none)."""
    epochs = list(accuracies)
    best = max(epochs, key=lambda epoch: (accuracies[epoch], -epoch))
    trained = f"epoch {epochs[0]}" if len(epochs) == 1 else f"epochs {epochs[0]}-{epochs[-1]}"
    return (
        f"done: {trained} in {seconds:.1f} s, best test accuracy {accuracies[best]:.4f} (epoch "
        f"{best}), peak pool memory {format_bytes(peak)}"
        + ("" if saved is None else f", states in {saved}")
    )


def offload_summary(stats):
    """What the last step moved to the host and back: the graph engine's figures, or the
    eager tensor cache's (nothing when nothing was offloaded)."""
    if "offload.bytes_to_host" in stats:
        return (
            f"  offloaded {format_bytes(stats['offload.bytes_to_host'])}/step, transfers "
            f"{1e3 * stats['offload.transfer_seconds']:.1f} ms, stalls "
            f"{1e3 * stats['offload.stall_seconds']:.1f} ms"
        )
    if "cache.misses" in stats:
        return (
            f"  tensor cache: {stats['cache.hits']} hits, {stats['cache.misses']} misses, "
            f"{format_bytes(stats['cache.bytes_to_host'])} out/step"
        )
    return ""


def optimal_summary(optimal):
    """One line: what the optimal plan (graph/optimal.py's OptimalPlan) decided and proved."""
    counts = {"keep": 0, "recompute": 0, "offload": 0}
    for row in optimal.rows:
        counts[row["decision"].split(" ")[0]] += 1  # "offload (on demand)" is an offload
    return (
        f"optimal plan: {counts['recompute']} tensors recomputed, {counts['offload']} offloaded, "
        f"{counts['keep']} kept; pool {format_bytes(optimal.pool_bytes)} of the budget "
        f"{format_bytes(optimal.budget)}; predicted {optimal.predicted_seconds * 1e3:.1f} ms/step "
        f"(the program's bound {optimal.lower_bound_seconds * 1e3:.1f} ms, gap {optimal.gap:.2%}, "
        f"{optimal.status}, solved in {optimal.solve_seconds:.2f} s; costs {optimal.cost_source}"
        + ("" if optimal.source == "solver" else f"; the plan of {optimal.source}, faster")
        + ")"
    )
