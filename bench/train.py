"""Training throughput: nnmem (eager and graph) against PyTorch CPU at its best, one run.

    python bench/train.py [--cases cnn resnet20 resnet56 densenet] [--windows 3] [--seconds 2]
                          [--settle 0.5] [--runners ...] [--busy] [--json out.json]

Every runner trains in a process of its own (so that no library's settings leak into
another's), warms up there (JIT compilation, graph recording), and then waits. The timed
windows alternate between the runners -- runner A, runner B, ..., A, B, ... -- so that all of
them see the same machine, and each runner's figure is its best window: noise from a shared
machine only ever takes speed away. A pause of --settle seconds separates two windows: a
runner's idle threads may spin for a while after its window (PyTorch's OpenMP threads do by
default), and would otherwise take the cores from the next runner's window.

Runners (PyTorch ones only where torch imports):
- nnmem_eager, nnmem_graph, nnmem_graph_unfused: the nnmem net (the SINGA CNN, ResNet-20
  and -56, the zoo DenseNet) with SGD, eager, ``use_graph=True``, and the same ``fuse=False``;
- pytorch: its twin, layer for layer (bench/torch_models.py), with PyTorch's defaults;
- pytorch_passive: the same, with OMP_WAIT_POLICY=PASSIVE (its OpenMP threads sleep instead of
  spinning between parallel regions: slower alone, better beside another busy process);
- pytorch_after_nnmem: PyTorch in a process that first imported nnmem and trained it a few
  steps: if nnmem changed a process-wide setting that slows other libraries, it shows here.
PyTorch at its best is the faster of its two OpenMP modes (default, passive) in this run.

Whole-step GFLOP/s: the floating-point operations of one step, counted on nnmem's recorded
graph (the convolution and matrix-product passes, nnmem/graph/costs.py:flops; recorded on a
planning device, which runs nothing), times images/s / batch. Beside it, the machine's peak:
its cores times OpenBLAS's sgemm 1024^3 on one thread (bench/conv.py), timed before the
runners start; PyTorch's FlopCounterMode count of its twin's step is a cross-check.

--busy adds one CPU-bound process (a Python loop), started and stopped by this script, and
times every round of windows twice, quiet and then busy (the loop is paused with SIGSTOP for
the quiet ones). The busy floor compares nnmem's median busy window with PyTorch's better
mode's (the larger of its two medians): with a busy neighbour the windows spread far more than
quiet ones, and the best one measures the luckiest scheduling. A runner's kept fraction (the
median over the rounds of its busy over its quiet speed) is printed as information.

Images/second for each runner, the ratios, the floors (PASS/FAIL lines, FLOORS below); the
last line is the JSON.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from nnmem.cli.arguments import non_negative_float, output_file, positive_float, positive_int

CASES = {
    "cnn": dict(model="cnn", batch=64, shape=(1, 28, 28), kwargs=dict(num_channels=1)),
    "mlp": dict(model="mlp", batch=64, shape=(1, 28, 28), kwargs=dict(hidden=(256, 256))),
    "resnet20": dict(
        model="resnet", batch=32, shape=(3, 32, 32), kwargs=dict(depth=20, num_channels=3)
    ),
    "resnet56": dict(
        model="resnet", batch=32, shape=(3, 32, 32), kwargs=dict(depth=56, num_channels=3)
    ),
    "densenet": dict(model="densenet", batch=32, shape=(3, 32, 32), kwargs=dict(num_channels=3)),
}
#: case -> (graph / PyTorch at its best, eager / PyTorch at its best); None: printed, no floor.
FLOORS = {
    "cnn": (1.3, 1.0),
    "resnet20": (1.3, 1.0),
    "resnet56": (1.2, None),
    "densenet": (1.2, None),
}
GRAPH_VS_EAGER, AFTER_NNMEM = 1.0, 0.9
PEAK_FLOORS = {"resnet20": 0.65}  # case -> nnmem graph's GFLOP/s over the sgemm peak
LR, MOMENTUM, WEIGHT_DECAY = 0.02, 0.9, 1e-5
HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_MODES = ("pytorch", "pytorch_passive")

RUNNERS = {  # name -> (framework, extra environment)
    "nnmem_eager": ("nnmem_eager", {}),
    "nnmem_graph": ("nnmem_graph", {}),
    "nnmem_graph_unfused": ("nnmem_graph_unfused", {}),  # compile(..., fuse=False)
    "pytorch": ("pytorch", {}),
    "pytorch_passive": ("pytorch", {"OMP_WAIT_POLICY": "PASSIVE"}),
    "pytorch_after_nnmem": ("pytorch_after_nnmem", {}),
}


def nnmem_model(case, dev, use_graph=False, seed=0, fuse=True):
    """(model, x, y): the case's nnmem net with SGD, compiled on `dev` (fusion on or off), and
    a fixed random batch."""
    import numpy as np

    from nnmem import opt, tensor
    from nnmem.models import create_model

    dev.SetRandSeed(seed)
    model = create_model(case["model"], num_classes=10, **case["kwargs"])
    model.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY))
    rng = np.random.default_rng(seed)
    tx = tensor.PlaceHolder((case["batch"],) + case["shape"], dev)
    ty = tensor.PlaceHolder((case["batch"],), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=use_graph, fuse=fuse)
    tx.copy_from_numpy(rng.random(tx.shape, dtype=np.float32))
    ty.copy_from_numpy(rng.integers(0, 10, case["batch"]).astype(np.int32))
    return model, tx, ty


def nnmem_step(case, use_graph=False, fuse=True):
    """A function running one nnmem training step on a fixed random batch (on a device of its
    own: its peak is this run's)."""
    from nnmem import device

    model, tx, ty = nnmem_model(case, device.create_cpu_device("2GiB"), use_graph, fuse=fuse)
    return lambda: model(tx, ty)


def nnmem_flops(case):
    """Floating-point operations of one training step, counted on the step nnmem records: the
    sum of graph/costs.py:flops over its nodes (conv and matmul passes, 2 per multiply-add).
    Recorded on a planning device, where nothing runs: the eager step runs the same passes."""
    from nnmem import device
    from nnmem.graph.costs import flops

    model, tx, ty = nnmem_model(case, device.create_planning_device(), use_graph=True)
    model(tx, ty)  # records and plans the step
    return sum(flops(node) for node in model.compiled_step(tx, ty).recorded)


def sgemm_peak():
    """(cores, GFLOP/s): this machine's float32 peak as the benchmark states it, its cores
    times OpenBLAS's sgemm 1024^3 on one thread (None without NumPy's OpenBLAS)."""
    from conv import sgemm_one_thread  # here, not at the top: conv.py imports this module

    cores = len(os.sched_getaffinity(0))
    one = sgemm_one_thread(repeats=7)
    return cores, None if one is None else cores * one


def torch_step(case, seed=0):
    """The same net in PyTorch (None when torch is not importable)."""
    try:
        import torch
        from torch_models import build
    except ImportError:
        return None
    torch.manual_seed(seed)
    net = build(case["model"], **case["kwargs"])
    sgd = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    x = torch.rand((case["batch"],) + case["shape"])
    y = torch.randint(0, 10, (case["batch"],))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        sgd.zero_grad()
        loss_fn(net(x), y).backward()
        sgd.step()

    return step


# -- a runner's process ---------------------------------------------------------------------
def worker(framework, case_name, warmup):
    """Build the step, warm it up, print "ready" (PyTorch: and its step's FlopCounterMode
    count); then for every "run SECONDS" line on stdin, train whole steps for about that long
    and print "steps seconds"."""
    case, counted = CASES[case_name], ""
    if framework == "pytorch_after_nnmem":
        warm = nnmem_step(case)
        for _ in range(2):
            warm()
        framework = "pytorch"
    if framework == "pytorch":
        step = torch_step(case)
        if step is None:
            print("unavailable", flush=True)
            return
        from torch_models import step_flops

        counted = f" {step_flops(step)}"
    else:
        step = nnmem_step(case, framework != "nnmem_eager", framework == "nnmem_graph")
    for _ in range(warmup):
        step()
    print(f"ready{counted}", flush=True)
    for line in sys.stdin:
        seconds = float(line.split()[1])
        steps, start = 0, time.perf_counter()
        while True:
            step()
            steps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        print(f"{steps} {elapsed}", flush=True)


class Runner:
    """A runner's process: started, warmed up, then timed window by window."""

    def __init__(self, name, case_name, warmup):
        framework, extra = RUNNERS[name]
        env = dict(os.environ, **extra)
        self.name, self.batch = name, CASES[case_name]["batch"]
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", framework, case_name, str(warmup)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=HERE,
        )
        ready = self._read().split()
        self.available = ready[0] == "ready"
        self.flops = float(ready[1]) if len(ready) > 1 else None  # PyTorch's count

    def _read(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"runner {self.name} ended early (exit {self.process.wait()})")
        return line.strip()

    def window(self, seconds):
        """Images/second over one window of about `seconds`."""
        self.process.stdin.write(f"run {seconds}\n")
        self.process.stdin.flush()
        steps, elapsed = self._read().split()
        return int(steps) * self.batch / float(elapsed)

    def close(self):
        self.process.stdin.close()
        self.process.wait()


class BusyLoop:
    """One CPU-bound process beside the runners: resume() for a busy window, pause() for a
    quiet one (SIGSTOP: it holds no core while paused)."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        self.pause()

    def pause(self):
        self.process.send_signal(signal.SIGSTOP)

    def resume(self):
        self.process.send_signal(signal.SIGCONT)
        time.sleep(0.2)  # let it get onto a core before the window opens

    def close(self):
        self.process.send_signal(signal.SIGCONT)
        self.process.kill()
        self.process.wait()


def measure(case_name, runners, windows, seconds, warmup, busy=False, settle=0.5):
    """({runner: [images/second of each round's window]} (and, with busy, the same under
    runner + "_busy"; a round's quiet windows come right before its busy ones), PyTorch's
    FlopCounterMode count of a step or None)."""
    started = [Runner(name, case_name, warmup) for name in runners]
    live = [r for r in started if r.available]
    torch_flops = next((r.flops for r in live if r.flops is not None), None)
    loop = BusyLoop() if busy else None
    speeds = {}
    try:
        for _ in range(windows):
            for mode in ("quiet", "busy") if busy else ("quiet",):
                if loop is not None:
                    loop.resume() if mode == "busy" else loop.pause()
                for runner in live:
                    key = runner.name + ("_busy" if mode == "busy" else "")
                    time.sleep(settle)
                    speeds.setdefault(key, []).append(runner.window(seconds))
    finally:
        if loop is not None:
            loop.close()
        for runner in started:
            runner.close()
    return speeds, torch_flops


def best_windows(speeds):
    """{runner: its best window's images/second}: noise on a shared machine only takes speed
    away, so the best window is the runner's own speed."""
    return {key: max(values) for key, values in speeds.items()}


def kept_fraction(quiet, busy):
    """The median over rounds of busy / quiet speed (the windows of one round)."""
    return statistics.median(b / q for q, b in zip(quiet, busy))


def report(case_name, speeds, busy, flops, peak, torch_flops=None):
    """Ratios, GFLOP/s and PASS/FAIL lines for one case; returns (figures, failures).
    `flops`: one step's, nnmem's count (torch_flops: FlopCounterMode's); `peak`: the machine's
    GFLOP/s (or None)."""
    r = best_windows(speeds)
    out, failed = dict(r, step_flops=flops, pytorch_step_flops=torch_flops), []
    graph_floor, eager_floor = FLOORS.get(case_name, (None, None))

    def check(label, value, floor):
        if floor is None:
            print(f"  {label}: {value:.2f}")
            return
        ok = value >= floor
        print(f"  {'PASS' if ok else 'FAIL'} {label}: {value:.2f} (floor {floor})")
        if not ok:
            failed.append(f"{case_name}: {label}")

    torch_modes = [mode for mode in TORCH_MODES if mode in r]
    if torch_modes:
        best = out["pytorch_best_mode"] = max(torch_modes, key=r.get)
        for name, floor in (("nnmem_graph", graph_floor), ("nnmem_eager", eager_floor)):
            if name in r:
                kind = name.split("_")[1]
                out[f"{kind}_vs_pytorch_best"] = r[name] / r[best]
                check(f"{kind} / PyTorch at its best ({best})", r[name] / r[best], floor)
    if "nnmem_graph" in r and "nnmem_graph_unfused" in r:  # what fusion gives (no floor)
        out["graph_vs_unfused"] = r["nnmem_graph"] / r["nnmem_graph_unfused"]
        check("graph / graph unfused", out["graph_vs_unfused"], None)
    if "nnmem_graph" in r and "nnmem_eager" in r:
        out["graph_vs_eager"] = r["nnmem_graph"] / r["nnmem_eager"]
        check("graph / eager", out["graph_vs_eager"], GRAPH_VS_EAGER)
    if "pytorch_after_nnmem" in r and "pytorch" in r:
        out["pytorch_after_nnmem_vs_pytorch"] = r["pytorch_after_nnmem"] / r["pytorch"]
        check("pytorch after nnmem / pytorch", out["pytorch_after_nnmem_vs_pytorch"], AFTER_NNMEM)
    torch_count = f", PyTorch's FlopCounterMode {torch_flops / 1e9:.3f}" if torch_flops else ""
    print(f"  a step's GFLOP: nnmem's count {flops / 1e9:.3f}{torch_count}")
    for name in ("nnmem_eager", "nnmem_graph"):
        if name in r:
            gflops = out[f"{name}_gflops"] = flops * r[name] / CASES[case_name]["batch"] / 1e9
            if peak is None:
                print(f"  {name}: {gflops:.0f} GFLOP/s (no peak: NumPy without OpenBLAS)")
                continue
            out[f"{name}_of_peak"] = gflops / peak
            floor = PEAK_FLOORS.get(case_name) if name == "nnmem_graph" else None
            check(f"{name} {gflops:.0f} GFLOP/s / peak {peak:.0f} GFLOP/s", gflops / peak, floor)
    if busy:
        names = [n for n in ("nnmem_eager", "nnmem_graph") + TORCH_MODES if n in r]
        beside = {n: statistics.median(speeds[f"{n}_busy"]) for n in names}
        kept = {n: kept_fraction(speeds[n], speeds[f"{n}_busy"]) for n in names}
        out.update({f"{n}_busy_median": v for n, v in beside.items()})
        out.update({f"{n}_kept": v for n, v in kept.items()})
        kept_text = ", ".join(f"{n} {v:.2f}" for n, v in kept.items())
        print(f"  kept fractions (median busy / quiet, information): {kept_text}")
        busy_modes = [mode for mode in TORCH_MODES if mode in beside]
        if busy_modes:  # PyTorch in its better mode beside the busy process
            mode = max(busy_modes, key=beside.get)
            # nnmem eager is held to it where it is to PyTorch on a quiet machine
            for name, floor in (("nnmem_graph", 1.0), ("nnmem_eager", eager_floor and 1.0)):
                if name in beside:
                    ratio = out[f"{name}_busy_vs_{mode}_busy"] = beside[name] / beside[mode]
                    check(f"{name} / {mode}, both beside a busy process", ratio, floor)
    return out, failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["cnn", "resnet20"], choices=list(CASES))
    parser.add_argument("--windows", type=positive_int, default=3, help="timed windows per runner")
    parser.add_argument("--seconds", type=positive_float, default=2.0, help="length of one window")
    parser.add_argument("--warmup", type=positive_int, default=3, help="untimed steps first")
    parser.add_argument(
        "--settle", type=non_negative_float, default=0.5, help="pause between windows (s)"
    )
    parser.add_argument("--runners", nargs="+", default=list(RUNNERS), choices=list(RUNNERS))
    parser.add_argument("--busy", action="store_true", help="also time beside a busy process")
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    cores, peak = sgemm_peak()  # first, on a quiet machine: no runner has started yet
    print(f"peak: {cores} cores x OpenBLAS sgemm 1024^3 on one thread = {peak or 0:.0f} GFLOP/s")
    results, failures = {"cores": cores, "peak_gflops": peak, "cases": {}}, []
    for name in args.cases:
        speeds, torch_flops = measure(
            name, args.runners, args.windows, args.seconds, args.warmup, args.busy, args.settle
        )
        flops = nnmem_flops(CASES[name])
        print(
            f"{name} (batch {CASES[name]['batch']}), images/s, best and median of "
            f"{args.windows} windows:"
        )
        for runner, values in speeds.items():
            print(f"  {runner:28} {max(values):9.0f} {statistics.median(values):9.0f}")
        figures, failed = report(name, speeds, args.busy, flops, peak, torch_flops)
        results["cases"][name] = figures
        failures += failed
    results["failed"] = failures
    emit_json(results, args.json)
    return 1 if failures else 0


def emit_json(results, path=None):
    """Print the results as one JSON line (the last line of every benchmark), and save it."""
    text = json.dumps(results, sort_keys=True, default=str)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(main())
