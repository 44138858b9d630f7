"""Concurrency control on the zoo: uniform threads against Strategies 1-2, 1-3 and 1-4.

    python bench/concurrency.py [--models resnet50 inception densenet] [--windows 3]
                                [--steps 3] [--batch N] [--interval 4] [--json out.json]

For each model (ResNet-50 on a small input, Inception, DenseNet), one training step compiled
four times on the CPU device, from the same seed and data:
- "off": every operation with all the cores, serial BFS replay (the uniform baseline);
- "1-2", "1-3", "1-4": nnmem.graph.concurrency's policies (see its docstring).

Printed per model: seconds per step of each policy (best of --windows alternating windows of
--steps steps, after the profiling steps), the speed-up over "off", what profiling cost (its
steps and seconds), and whether the losses and every state after the run are bit-identical to
"off". Then the prediction accuracy of hill climbing's linear interpolation: every operation
is timed at every thread count from 1 to the cores (a full sweep), the climb with --interval
is replayed on those times, and the counts it did not try are predicted and compared (1 -
mean relative error; the paper reports 95% for interval 4). Where every count was tried (a
machine with few cores), there is nothing to predict and it says so.
"""

import argparse
import os
import sys
import time

import numba
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import emit_json  # noqa: E402

from nnmem import device, opt, tensor  # noqa: E402
from nnmem.cli.arguments import non_negative_float, output_file, positive_int
from nnmem.graph.concurrency import op_key  # noqa: E402
from nnmem.graph.hill_climbing import HillClimbing  # noqa: E402
from nnmem.models import create_model  # noqa: E402

MODELS = {
    "resnet50": ("resnet", (4, 3, 32, 32), dict(depth=50)),
    "inception": ("inception", (8, 3, 32, 32), dict()),
    "densenet": ("densenet", (8, 3, 32, 32), dict()),
}
POLICIES = ("off", "1-2", "1-3", "1-4")


def build(name, policy, seed=0, batch=None):
    """(model, tx, ty) compiled for `policy`, with a fixed batch in the placeholders (of the
    model's own size, or `batch` images)."""
    zoo_name, shape, kwargs = MODELS[name]
    if batch is not None:
        shape = (batch,) + shape[1:]
    dev = device.create_cpu_device("4GiB")
    dev.SetRandSeed(seed)
    model = create_model(zoo_name, num_classes=10, **kwargs)
    model.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx = tensor.PlaceHolder(shape, dev)
    ty = tensor.PlaceHolder(shape[:1], dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True, concurrency=policy)
    rng = np.random.default_rng(seed)
    tx.copy_from_numpy(rng.standard_normal(shape).astype(np.float32))
    ty.copy_from_numpy(rng.integers(0, 10, shape[0]).astype(np.int32))
    return model, tx, ty


def loss_of(result):
    return float(tensor.to_numpy(result[1])[0])


def run_policy(name, policy, batch=None):
    """Train through the profiling steps; (model, tx, ty, losses, profile)."""
    model, tx, ty = build(name, policy, batch=batch)
    losses = [loss_of(model(tx, ty))]
    step = model.compiled_step(tx, ty)
    while step.concurrency is not None and step.concurrency.profiling:
        losses.append(loss_of(model(tx, ty)))
    return model, tx, ty, losses, step.concurrency_profile()


def identical(a, b):
    return a[0] == b[0] and all(np.array_equal(a[1][k], b[1][k]) for k in a[1])


def sweep(step, cores, steps):
    """{key: {threads: seconds per instance}}: every call of the step timed at every count
    from 1 to `cores` (the fastest of `steps` whole steps, each call in order)."""
    times = {}
    caller = numba.get_num_threads()
    try:
        for threads in range(1, cores + 1):
            numba.set_num_threads(threads)
            for _ in range(steps):
                per_step = {}
                for i, (_, fn, arrays) in zip(step.order, step.calls):
                    start = time.perf_counter()
                    fn(*arrays)
                    key = op_key(step.nodes[i])
                    per_step.setdefault(key, []).append(time.perf_counter() - start)
                for key, samples in per_step.items():
                    mean = sum(samples) / len(samples)
                    best = times.setdefault(key, {}).get(threads, float("inf"))
                    times[key][threads] = min(best, mean)
    finally:
        numba.set_num_threads(caller)
    return times


def prediction_accuracy(times, cores, interval):
    """(accuracy, predicted counts): the climb with `interval` replayed on the swept times,
    its interpolation of the counts it did not try against their measured times."""
    errors = []
    for key, curve in times.items():
        climbing = HillClimbing([key], cores, interval, repeats=1)
        while not climbing.done:
            climbing.step_done({key: curve[climbing.threads(key)]})
        climb = climbing.climbs[key]
        for threads in range(1, max(climb.tried) + 1):
            if threads not in climb.tried:
                actual = curve[threads]
                errors.append(abs(climb.predict(threads) - actual) / actual)
    if not errors:
        return None, 0
    return 1.0 - float(np.mean(errors)), len(errors)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--windows", type=positive_int, default=3)
    parser.add_argument("--steps", type=positive_int, default=3, help="steps per timed window")
    parser.add_argument(
        "--batch",
        type=positive_int,
        help="images per batch for every model (default: 4 for ResNet-50, 8)",
    )
    parser.add_argument("--interval", type=positive_int, default=4, help="hill climbing's interval")
    parser.add_argument(
        "--settle", type=non_negative_float, default=0.5, help="pause between windows (s)"
    )
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    cores = numba.config.NUMBA_NUM_THREADS
    results = {"cores": cores, "batch": args.batch, "models": {}}
    layer = device.get_default_device().threading_layer()
    print(f"{cores} cores; Numba threading layer: {layer}")
    all_identical = True
    for name in args.models:
        runs = {policy: run_policy(name, policy, args.batch) for policy in POLICIES}
        best = {policy: float("inf") for policy in POLICIES}
        for _ in range(args.windows):  # alternating windows: every policy sees the same machine
            for policy, (model, tx, ty, losses, _) in runs.items():
                time.sleep(args.settle)  # the last window's idle threads go to sleep first
                start = time.perf_counter()
                for _ in range(args.steps):
                    losses.append(loss_of(model(tx, ty)))
                best[policy] = min(best[policy], (time.perf_counter() - start) / args.steps)
        total = max(len(run[3]) for run in runs.values())
        outcome = {}
        for policy, (model, tx, ty, losses, _) in runs.items():
            while len(losses) < total:  # as many steps as the policy that profiled longest
                losses.append(loss_of(model(tx, ty)))
            states = {k: tensor.to_numpy(v) for k, v in model.get_states().items()}
            outcome[policy] = (losses, states)
        figures = {}
        batch = runs["off"][1].shape[0]
        print(
            f"\n{name}, batch {batch}: seconds per step "
            f"(best of {args.windows} windows of {args.steps})"
        )
        print(f"  {'policy':6} {'s/step':>8} {'speed-up':>8} {'profiling':>16} {'identical':>9}")
        for policy in POLICIES:
            profile = runs[policy][4]
            same = identical(outcome[policy], outcome["off"])
            all_identical &= same
            cost = (
                f"{profile['profiling_steps']} st {profile['profiling_seconds']:.2f} s"
                if profile
                else "-"
            )
            figures[policy] = {
                "seconds_per_step": best[policy],
                "speedup_over_off": best["off"] / best[policy],
                "profiling_steps": profile["profiling_steps"] if profile else 0,
                "profiling_seconds": profile["profiling_seconds"] if profile else 0.0,
                "identical_to_off": same,
            }
            print(
                f"  {policy:6} {best[policy]:8.3f} {best['off'] / best[policy]:8.2f} {cost:>16} "
                f"{'yes' if same else 'NO':>9}"
            )
        smt = runs["1-4"][4]
        print(
            f"  Strategy 4: {smt['smt_threads_per_core']} hardware thread(s) per core "
            f"({smt['smt_source']}): {'active' if smt['strategy_4_active'] else 'nothing to share'}"
        )
        model, tx, ty, _, _ = runs["off"]
        times = sweep(model.compiled_step(tx, ty), cores, steps=2)
        accuracy, predicted = prediction_accuracy(times, cores, args.interval)
        if accuracy is None:
            print(f"  interpolation: n/a (interval {args.interval} on {cores} cores tried all)")
        else:
            print(
                f"  interpolation (interval {args.interval}): {accuracy:.1%} accurate over "
                f"{predicted} predicted (operation, count) pairs"
            )
        results["models"][name] = {
            "policies": figures,
            "prediction_accuracy": accuracy,
            "predicted_pairs": predicted,
            "smt_threads_per_core": smt["smt_threads_per_core"],
        }
    results["all_identical"] = all_identical
    emit_json(results, args.json)
    return 0 if all_identical else 1


if __name__ == "__main__":
    sys.exit(main())
