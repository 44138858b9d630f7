"""The convolution passes inside a training step against the same passes alone.

A pass that runs at 200 GFLOP/s in bench/conv.py's loop may run slower inside the step: its
inputs were just written by other kernels (perhaps on the other core), the caches hold the
last operation's tensors, not its own, and its threads may have gone to sleep since the last
parallel region. This module measures that gap for every convolution pass of one compiled
graph step (the ``train.py`` case, nnmem graph mode):

- in the step: each pass's kernel call timed where it runs (a wrapper around the device's
  ``run_kernel``, on which the replay calls each kernel while the profiler's verbosity is on;
  the profiler itself times nothing here), the fastest over --steps steps;
- alone: the same kernel function on copies of the same arrays, called --repeats times in a
  row (the fastest), as bench/conv.py times its passes;
- cold: the same calls, each after the calling thread writes FLUSH_BYTES elsewhere, which
  evicts the arrays from that core's caches and from as much of the shared L3 as that covers
  (the other cores' private L2 caches keep what they hold). Where "in the step" is close to
  "cold" and far from "alone", the step loses its time to memory, not to the kernel's
  arithmetic or its threads.

"Alone" and "cold" run on copies of the arrays the step's last call had, taken after the
steps: the same shapes, and values that later kernels may have written over (what matters
only for denormals, which no pass here meets).

A pass is recognised by the ``conv_algorithm`` label ("forward", "backward data", "backward
filter", and the algorithm "auto" kept) that nnmem/ops/conv.py puts on its kernel calls, so
the default "auto" algorithm is what is measured. GFLOP/s counts the pass's floating-point
operations as the profiler does (nnmem/devices/flops.py)."""

import time

import numpy as np

from nnmem.devices.flops import kernel_flops

#: Bytes written before each "cold" call: 32 times the 2 MiB L2 cache of one core here.
FLUSH_BYTES = 64 << 20


def _recorder(original, calls):
    """A run_kernel that times each convolution pass's call into `calls` (name, pass) ->
    [seconds, kernel function, arrays of the last call] and runs every other kernel as is."""

    def run_kernel(name, fn, arrays):
        label = getattr(fn, "conv_algorithm", None)
        if label is None:
            return original(name, fn, arrays)
        start = time.perf_counter()
        original(name, fn, arrays)
        seconds = time.perf_counter() - start
        entry = calls.setdefault((name, label[0]), [float("inf"), fn, arrays, label[1]])
        entry[0] = min(entry[0], seconds)
        entry[1], entry[2] = fn, arrays
        return None

    return run_kernel


def _alone(fn, arrays, repeats, flush=None):
    """Seconds of the fastest of `repeats` calls of fn on copies of the arrays (after one),
    each after writing the array `flush` when one is given (cold caches)."""
    copies = [np.array(a) for a in arrays]
    fn(*copies)
    best = float("inf")
    for _ in range(repeats):
        if flush is not None:
            flush += 1
        start = time.perf_counter()
        fn(*copies)
        best = min(best, time.perf_counter() - start)
    return best


def in_step(case_name, steps, repeats):
    """[{layer, pass, algorithm, shapes, flops, in_step_ms, alone_ms, cold_ms}] for every
    convolution pass of one training step of the case's compiled graph (train.py's CASES),
    in the order of the step."""
    from train import CASES, nnmem_model  # here: train.py imports conv.py, which imports this

    from nnmem import device

    dev = device.create_cpu_device("2GiB")
    model, tx, ty = nnmem_model(CASES[case_name], dev, use_graph=True)
    for _ in range(3):  # compile, record and plan the step, and let "auto" pick its kernels
        model(tx, ty)
    dev.SetSkipIteration(1 << 62)  # the replay calls run_kernel; the profiler times nothing
    dev.SetVerbosity(2)
    calls = {}
    dev.run_kernel = _recorder(dev.run_kernel, calls)
    try:
        for _ in range(steps):
            model(tx, ty)
    finally:
        del dev.run_kernel  # the class's method again
        dev.SetVerbosity(0)
    flush = np.zeros(FLUSH_BYTES // 4, np.float32)
    rows = []
    for (name, pass_name), (seconds, fn, arrays, algorithm) in calls.items():
        rows.append(
            {
                "layer": name.split(":")[0],
                "pass": pass_name,
                "algorithm": algorithm(),
                "shapes": [list(a.shape) for a in arrays],
                "flops": kernel_flops(name, [a.shape for a in arrays]),
                "in_step_ms": seconds * 1e3,
                "alone_ms": _alone(fn, arrays, repeats) * 1e3,
                "cold_ms": _alone(fn, arrays, repeats, flush) * 1e3,
            }
        )
    return rows


def report(rows, peak, within=0.9, conv3x3_of_peak=0.75):
    """Print one line per pass (in the step, alone, their ratio, the share of the peak) and
    the floors: every pass in the step at least `within` of its speed alone, conv3x3's passes
    at least `conv3x3_of_peak` of the peak (cores x sgemm on one thread). Returns the floors'
    {name: passed}."""
    print(
        f"{'layer':28} {'pass':15} {'algorithm':9} {'in the step':>17} {'alone':>17} "
        f"{'ratio':>6} {'cold':>9} {'of peak':>8}"
    )
    ratios, shares = [], []
    for row in rows:
        gf_step = row["flops"] / row["in_step_ms"] / 1e6
        gf_alone = row["flops"] / row["alone_ms"] / 1e6
        ratio = row["alone_ms"] / row["in_step_ms"]
        share = gf_step / peak if peak else None
        ratios.append(ratio)
        if row["algorithm"] == "conv3x3" and share is not None:
            shares.append(share)
        share_text = f"{share:8.0%}" if share is not None else f"{'-':>8}"
        print(
            f"{row['layer'][:28]:28} {row['pass']:15} {row['algorithm'][:9]:9} "
            f"{row['in_step_ms']:6.3f} ms {gf_step:4.0f} GF {row['alone_ms']:6.3f} ms "
            f"{gf_alone:4.0f} GF {ratio:6.2f} {row['cold_ms']:6.3f} ms {share_text}"
        )
    if rows:
        keys = ("in_step_ms", "alone_ms", "cold_ms")
        total = {key: sum(row[key] for row in rows) for key in keys}
        print(
            f"all {len(rows)} passes: {total['in_step_ms']:.2f} ms in the step, "
            f"{total['alone_ms']:.2f} ms alone, {total['cold_ms']:.2f} ms cold"
        )
    floors = {}
    if ratios:
        _floor(
            floors, "in the step / alone", ratios, within,
            f"every pass in the step at least {within:.0%} of its speed alone",
            f"lowest {min(ratios):.2f}, median {float(np.median(ratios)):.2f}",
        )  # fmt: skip
    if shares:
        _floor(
            floors, "conv3x3 of peak", shares, conv3x3_of_peak,
            f"conv3x3's passes in the step at least {conv3x3_of_peak:.0%} of the peak",
            f"{min(shares):.0%} to {max(shares):.0%}",
        )  # fmt: skip
    return floors


def _floor(floors, name, values, floor, claim, spread):
    """floors[name] = every value at least `floor`, and its PASS/FAIL line: the claim, how many
    values meet it, and their `spread`."""
    low = sum(value < floor for value in values)
    floors[name] = low == 0
    passed = "PASS" if low == 0 else "FAIL"
    print(f"{passed}: {claim} ({len(values) - low} of {len(values)}; {spread})")
