"""The optimal memory plan (memory="optimal"): measured speed against every heuristic, the cost
model's error, AlexNet beside SuperNeurons, and the solver's time on deep ResNets, one run.

    python bench/optimal.py [--quick] [--models resnet20 resnet56 densenet vgg16]
                            [--frontier-png DIR] [--json out.json]

1. measured, on the CPU: ResNet-20 and ResNet-56 (batch 32, 3x32x32), the zoo DenseNet
   (growth 12, 4 layers per block, 3 blocks; batch 64, 3x32x32) and VGG-16 at a quarter of
   its channels (batch 128, 3x32x32): steps of 0.15-1 s on 2 cores. Each with the CPU
   device's copy link throttled to 2 and to 0.5 GB/s. The step is recorded there and an
   OptimalPlanner built on it (its costs are the kernels timed on that device); budgets of
   0.9, 0.7, 0.5 and 0.35 of the liveness pool and the smallest pool the optimal plan fits
   (planner.smallest(), with the recorded workspaces: memory="optimal" records again with
   smaller convolution workspaces when no plan fits, so it may fit a smaller budget).
   Then, each on a CPU device of its own with the same link: a model compiled with
   memory="optimal" at every budget, and one per heuristic (nnmem.planning.HEURISTICS,
   compiled with recompute=..., offload=...). All of them are built first, warmed up for
   WARMUP steps, and then timed one step each in turn, ROUNDS times (so that a busy moment
   of this shared machine slows them all alike); a run's time is the median of its timed
   steps (its fastest step and the load average are printed beside it, not floored).
   Floors: (a) at every budget the optimal plan's measured step <= 1.05x that of every
   heuristic whose pool fits the budget (and no budget a heuristic fits is infeasible for
   it); (b) the cost model's error |predicted - measured| / measured <= 0.10 for every
   optimal plan; every optimal run's losses equal those of the run with no technique, bit
   for bit.
2. AlexNet, batch 200, 3x227x227, planned on shapes alone (a planning device) with direct
   convolutions (conv.WORKSPACE_LIMIT_BYTES = 0) and counted without the persistent bytes:
   bench/plan.py's "data, no workspaces" view, the closest to what SuperNeurons counts, in
   MiB (its 886.23 is 4 x 200x96x55x55 float32 = 4 x 221.56 MiB). The heuristics of
   nnmem.planning.plan (recompute="cost-aware", offload="all") beside SuperNeurons'
   1489.355 / 1132.155 / 886.23, the optimal plan's smallest pool, and the optimal plan at
   the budgets where the heuristics sit (times from the flop model). Floors: optimal smallest
   <= 886.23 MiB; liveness <= 1489.355; liveness + offload <= 1132.155.
3. the solver's time on this machine (a planning device, the flop model, batch 32, 3x32x32):
   ResNet-56, -110, -164 and -299 (bottleneck blocks for the last two, as in He et al.'s
   pre-activation paper) at 0.5 of the liveness pool with a 60 s limit, and ResNet-1001 with
   a 300 s limit; building the planner and planning, timed apart. Floors: build + plan <= 60 s
   up to 300 layers, <= 300 s for ResNet-1001.
4. --frontier-png DIR: ResNet-56's frontier (nnmem.planning.frontier on a CPU device whose
   link runs at 0.5 GB/s) drawn to DIR/frontier_resnet56.png (and its data, .json, beside it).

--quick: ResNet-20 only, at 0.7 of the liveness pool and the smallest pool, link 2 GB/s, 3
timed rounds, and ResNet-56 alone in section 3 (a smoke test). Sizes are MiB (2**20 bytes),
times ms unless stated. The floors print PASS or FAIL; exit status 1 on a FAIL. The last line
is the JSON.
"""

import argparse
import contextlib
import os
import statistics
import sys
import time
from typing import NamedTuple

import numpy as np
from train import emit_json

import nnmem.ops.conv as conv_op
from nnmem import device, opt, tensor
from nnmem.cli.arguments import output_file
from nnmem.cli.frontier import draw_frontier, print_frontier
from nnmem.graph.optimal import NoPlanFits, OptimalPlanner
from nnmem.graph.plan import pool_bytes_needed
from nnmem.models import create_model
from nnmem.planning import HEURISTICS, frontier, heuristic_name, plan

MIB = 2**20
#: Every CPU device's pool: room for any plan here (np.empty only reserves address space).
POOL = "2GiB"
LINKS = (2.0, 0.5)
SHARES = (0.9, 0.7, 0.5, 0.35)  # budgets, as fractions of the liveness pool
WARMUP, ROUNDS = 2, 5
#: Floors: the optimal plan's measured step against the fastest heuristic that fits, and the
#: cost model's relative error.
SPEED_FLOOR, COST_MODEL_FLOOR = 1.05, 0.10


class Net(NamedTuple):
    name: str
    make: object  # () -> a new Model
    shape: tuple  # batch first


NETS = {
    "resnet20": Net("ResNet-20", lambda: create_model("resnet", depth=20), (32, 3, 32, 32)),
    "resnet56": Net("ResNet-56", lambda: create_model("resnet", depth=56), (32, 3, 32, 32)),
    "densenet": Net("DenseNet", lambda: create_model("densenet"), (64, 3, 32, 32)),
    "vgg16": Net(
        "VGG-16/4", lambda: create_model("vgg16", num_classes=10, width=0.25), (128, 3, 32, 32)
    ),
}

#: SuperNeurons' AlexNet figures (section 4.1), MiB. "all three" is 4 x 200x96x55x55 float32
#: (four of conv1's outputs): 886.23 rounded, exactly 886.23046875, the figure compared.
SUPERNEURONS_MIB = {
    "liveness": 1489.355,
    "liveness + offload": 1132.155,
    "all three": 4 * 200 * 96 * 55 * 55 * 4 / MIB,
}

#: Section 3: (name, depth, block, seconds allowed).
SOLVE_NETS = [
    ("ResNet-56", 56, None, 60),
    ("ResNet-110", 110, None, 60),
    ("ResNet-164", 164, "bottleneck", 60),
    ("ResNet-299", 299, "bottleneck", 60),
    ("ResNet-1001", 1001, None, 300),  # 999 = 9 x 111: bottleneck blocks, 111 per stage
]


class Floors:
    """The floors checked so far: each prints one PASS or FAIL line."""

    def __init__(self):
        self.lines = []

    def check(self, what, passed):
        line = f"{'PASS' if passed else 'FAIL'}: {what}"
        print(f"    {line}", flush=True)
        self.lines.append(line)

    @property
    def failed(self):
        return [line for line in self.lines if line.startswith("FAIL")]


# -- 1. measured runs -------------------------------------------------------------------------
class Run:
    """One model trained on one fixed batch, on a CPU device of its own: every step's seconds
    (the model call: on the CPU it returns when the step is done) and loss."""

    def __init__(self, net, link, **compile_options):
        self.dev = device.create_cpu_device(POOL, link_gbps=link)
        self.dev.SetRandSeed(0)  # every run starts from the same parameters
        self.model = net.make()
        self.model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
        rng = np.random.default_rng(0)
        self.tx = tensor.PlaceHolder(net.shape, self.dev)
        self.ty = tensor.PlaceHolder((net.shape[0],), self.dev, tensor.int32)
        self.tx.copy_from_numpy(rng.random(net.shape, dtype=np.float32))
        self.ty.copy_from_numpy(rng.integers(0, 10, net.shape[0]).astype(np.int32))
        # unfused: the optimal planner and the heuristics it weighs plan the unfused recording
        # (CompiledStep.recording), so each run's pool is the one they planned
        options = {"fuse": False, **compile_options}
        self.model.compile([self.tx], is_train=True, use_graph=True, **options)
        self.seconds, self.losses = [], []

    def step(self):
        start = time.perf_counter()
        _, loss = self.model(self.tx, self.ty)
        self.seconds.append(time.perf_counter() - start)
        self.losses.append(float(tensor.to_numpy(loss)[0]))

    @property
    def compiled(self):
        return self.model.compiled_step(self.tx, self.ty)

    @property
    def measured(self):
        """Seconds per step: the median of the timed steps (those after the warm-up)."""
        return statistics.median(self.seconds[WARMUP:])

    @property
    def fastest_step(self):
        """The fastest timed step: what this run does when the shared machine lets it."""
        return min(self.seconds[WARMUP:])

    @property
    def high_water(self):
        return self.dev.memory_stats()["high_water_bytes"]


class Recording(NamedTuple):
    run: Run  # the recording run: kept alive, its tensors count in the pools measured on it
    planner: OptimalPlanner
    liveness: int  # the liveness plan's pool
    smallest: int  # the smallest pool the optimal plan fits
    proven: int  # the solver's bound: no plan fits in less


def record(net, link):
    """The Recording of `net`'s step on a CPU device with `link`: the planner's costs are
    measured there."""
    run = Run(net, link)
    run.step()  # records, plans liveness, runs
    step = run.compiled
    planner = OptimalPlanner(*step.recording(optimal=True), run.dev, False, True)
    liveness = pool_bytes_needed(planner.liveness, run.dev, True)
    _, smallest, proven = planner.smallest()
    return Recording(run, planner, liveness, smallest, proven)


def optimal_run(net, link, budget):
    """A Run compiled with memory="optimal" at `budget` and stepped once (recorded, solved),
    or the NoPlanFits its first step raised."""
    run = Run(net, link, memory="optimal", budget=budget)
    try:
        run.step()
    except NoPlanFits as error:
        return error
    return run


def time_in_turns(runs, rounds):
    """Warm every run up, then time one step of each in turn, `rounds` times."""
    for run in runs:
        while len(run.seconds) < WARMUP:
            run.step()
    for _ in range(rounds):
        for run in runs:
            run.step()


def heuristic_rows(planner, runs, reference):
    """Per heuristic: its pool (planned, and the high-water mark measured), the cost model's
    time and the measured one, and whether its losses are the reference run's."""
    rows = {}
    for (recompute, offload), run in runs.items():
        planned = planner.make_heuristic(recompute, offload)
        rows[heuristic_name(recompute, offload)] = {
            "pool_mib": pool_bytes_needed(planned, planner.device, True) / MIB,
            "high_water_mib": run.high_water / MIB,
            "predicted_ms": planner.seconds(planned) * 1e3,
            "measured_ms": run.measured * 1e3,
            "fastest_step_ms": run.fastest_step * 1e3,
            "identical": run.losses == reference.losses,
        }
    return rows


def budget_row(label, budget, outcome, heuristics, reference):
    """One budget: the optimal plan (or its NoPlanFits) beside the fastest heuristic that fits."""
    fitting = {n: h for n, h in heuristics.items() if h["pool_mib"] * MIB <= budget}
    best = min(fitting, key=lambda n: fitting[n]["measured_ms"], default=None)
    row = {
        "label": label,
        "budget_mib": budget / MIB,
        "fitting_heuristics": sorted(fitting),
        "best_heuristic": best,
        "best_heuristic_ms": fitting[best]["measured_ms"] if best else None,
    }
    if isinstance(outcome, NoPlanFits):
        row.update(feasible=False, smallest_mib=outcome.smallest / MIB)
        row.update(proven_mib=outcome.proven / MIB)
        return row
    decided = outcome.compiled.optimal
    recomputed, offloaded = len(decided.decisions.recompute), len(decided.decisions.offload)
    measured, fastest = outcome.measured, outcome.fastest_step
    fastest_fitting = min((h["fastest_step_ms"] for h in fitting.values()), default=None)
    row.update(
        feasible=True,
        pool_mib=decided.pool_bytes / MIB,
        high_water_mib=outcome.high_water / MIB,
        predicted_ms=decided.predicted_seconds * 1e3,
        measured_ms=measured * 1e3,
        fastest_step_ms=fastest * 1e3,
        predicted_over_measured=decided.predicted_seconds / measured,
        cost_model_error=abs(decided.predicted_seconds - measured) / measured,
        cost_model_error_fastest=abs(decided.predicted_seconds - fastest) / fastest,
        lower_bound_ms=decided.lower_bound_seconds * 1e3,
        gap=decided.gap,
        status=decided.status,
        solve_s=decided.solve_seconds,
        rounds=decided.rounds,
        recomputed=recomputed,
        offloaded=offloaded,
        kept=len(decided.rows) - recomputed - offloaded,
        identical=outcome.losses == reference.losses,
        over_best=measured * 1e3 / row["best_heuristic_ms"] if best else None,
        # the fastest steps (what each run does when the machine lets it): not a floor
        over_best_fastest=fastest * 1e3 / fastest_fitting if best else None,
    )
    return row


def measure_net(net, link, shares, rounds, floors):
    """Section 1 for one net and one link: the table, the floors, and the figures."""
    start = time.perf_counter()
    recording = record(net, link)
    planner, liveness = recording.planner, recording.liveness
    budgets = [(f"{s:.2f} x liveness", int(s * liveness)) for s in shares]
    budgets.append(("smallest", recording.smallest))
    outcomes = {label: optimal_run(net, link, b) for label, b in budgets}
    heuristic_runs = {(r, o): Run(net, link, recompute=r, offload=o) for r, o in HEURISTICS}
    reference = heuristic_runs[("none", "none")]  # no technique: the losses to match
    timed = [o for o in outcomes.values() if isinstance(o, Run)] + list(heuristic_runs.values())
    time_in_turns(timed, rounds)
    load = os.getloadavg()[0]  # other processes on this machine, as the timing ends
    heuristics = heuristic_rows(planner, heuristic_runs, reference)
    rows = [budget_row(lb, b, outcomes[lb], heuristics, reference) for lb, b in budgets]
    result = {
        "model": net.name,
        "input_shape": list(net.shape),
        "link_gbps": link,
        "liveness_mib": liveness / MIB,
        "smallest_mib": recording.smallest / MIB,
        "proven_mib": recording.proven / MIB,
        "outside_arena_mib": planner.outside / MIB,
        "step_predicted_ms": planner.costs.step_seconds * 1e3,
        "cost_source": planner.costs.source,
        "heuristics": heuristics,
        "budgets": rows,
        "seconds": time.perf_counter() - start,
        "load_average_1min": load,
    }
    print_net(result)
    check_net(result, floors)
    return result


def print_net(result):
    print(
        f"\n{result['model']} {'x'.join(map(str, result['input_shape']))}, link "
        f"{result['link_gbps']:g} GB/s: liveness pool {result['liveness_mib']:.1f} MiB, smallest "
        f"optimal {result['smallest_mib']:.1f} MiB (proven >= {result['proven_mib']:.1f}), no "
        f"technique predicted {result['step_predicted_ms']:.1f} ms ({result['cost_source']}); "
        f"{result['seconds']:.0f} s, load average {result['load_average_1min']:.1f}"
    )
    print(
        f"  {'heuristic':34} {'pool':>7} {'hwm':>7} {'predicted':>9} {'measured':>8} "
        f"{'fastest':>7} {'same':>5}"
    )
    for name, h in sorted(result["heuristics"].items(), key=lambda kv: -kv[1]["pool_mib"]):
        print(
            f"  {name:34} {h['pool_mib']:7.1f} {h['high_water_mib']:7.1f} "
            f"{h['predicted_ms']:9.1f} {h['measured_ms']:8.1f} {h['fastest_step_ms']:7.1f} "
            f"{str(h['identical']):>5}"
        )
    print(
        f"  {'optimal at':18} {'budget':>7} {'pool':>7} {'predicted':>9} {'measured':>8} "
        f"{'fastest':>7} {'error':>6} {'gap':>6} {'solve s':>7} {'rec/off/kept':>12}  "
        "fastest heuristic that fits"
    )
    for row in result["budgets"]:
        best = "none fits"
        if row["best_heuristic"]:
            best = f"{row['best_heuristic']} {row['best_heuristic_ms']:.1f}"
        if not row["feasible"]:
            print(
                f"  {row['label']:18} {row['budget_mib']:7.1f} infeasible: smallest "
                f"{row['smallest_mib']:.1f} MiB (proven >= {row['proven_mib']:.1f}); {best}"
            )
            continue
        counts = f"{row['recomputed']}/{row['offloaded']}/{row['kept']}"
        print(
            f"  {row['label']:18} {row['budget_mib']:7.1f} {row['pool_mib']:7.1f} "
            f"{row['predicted_ms']:9.1f} {row['measured_ms']:8.1f} {row['fastest_step_ms']:7.1f} "
            f"{row['cost_model_error']:6.1%} {row['gap']:6.2%} {row['solve_s']:7.2f} "
            f"{counts:>12}  {best}"
        )


def check_net(result, floors):
    where = f"{result['model']} at {result['link_gbps']:g} GB/s"
    for row in result["budgets"]:
        at = f"{where}, {row['label']} ({row['budget_mib']:.1f} MiB)"
        if not row["feasible"]:
            fits = row["fitting_heuristics"]
            floors.check(
                f"{at}: infeasible, and no heuristic fits it"
                + (f" (but {', '.join(fits)} do)" if fits else ""),
                not fits,
            )
            continue
        if row["best_heuristic"]:
            floors.check(
                f"{at}: optimal {row['measured_ms']:.1f} ms <= {SPEED_FLOOR}x the fastest "
                f"heuristic that fits ({row['best_heuristic']}, {row['best_heuristic_ms']:.1f} "
                f"ms): {row['over_best']:.2f}x (fastest steps: {row['over_best_fastest']:.2f}x)",
                row["over_best"] <= SPEED_FLOOR,
            )
        floors.check(
            f"{at}: cost model |predicted - measured| / measured = {row['cost_model_error']:.1%}"
            f" <= {COST_MODEL_FLOOR:.0%} ({row['predicted_ms']:.1f} against "
            f"{row['measured_ms']:.1f} ms; against its fastest step "
            f"{row['cost_model_error_fastest']:.1%})",
            row["cost_model_error"] <= COST_MODEL_FLOOR,
        )
    feasible = [row for row in result["budgets"] if row["feasible"]]
    floors.check(
        f"{where}: the optimal runs' losses equal the no-technique run's, bit for bit",
        all(row["identical"] for row in feasible),
    )


# -- 2. AlexNet beside SuperNeurons -----------------------------------------------------------
@contextlib.contextmanager
def direct_convolutions():
    """No convolution workspace fits: every convolution runs direct (SuperNeurons counts its
    workspaces apart, from the memory left free)."""
    limit = conv_op.WORKSPACE_LIMIT_BYTES
    conv_op.WORKSPACE_LIMIT_BYTES = 0
    try:
        yield
    finally:
        conv_op.WORKSPACE_LIMIT_BYTES = limit


def recorded_planner(model, shape, dev):
    """An OptimalPlanner of `model`'s training step on batches of `shape`, recorded on `dev`
    (a planning device: nothing runs), and the wall seconds of recording and of building it."""
    model.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx = tensor.PlaceHolder(shape, dev)
    ty = tensor.PlaceHolder((shape[0],), dev, tensor.int32)
    start = time.perf_counter()
    model.compile([tx], is_train=True, use_graph=True)
    tx.set_value(0)  # written, so that reading them is allowed (a planning device only allocates)
    ty.set_value(0)
    model(tx, ty)
    step = model.compiled_step(tx, ty)
    recorded = time.perf_counter()
    planner = OptimalPlanner(*step.recording(optimal=True), dev, False, True)
    return planner, recorded - start, time.perf_counter() - recorded


def alexnet_section(floors):
    shape = (200, 3, 227, 227)
    print(f"\nAlexNet {'x'.join(map(str, shape))}, planned on shapes alone, direct convolutions")
    with direct_convolutions():
        heuristic = plan(create_model("alexnet"), shape, recompute="cost-aware", offload="all")
        planner, _, _ = recorded_planner(
            create_model("alexnet"), shape, device.create_planning_device()
        )
        _, smallest, proven = planner.smallest()
        persistent = heuristic.persistent_bytes
        rows = {}
        for t in heuristic.techniques:
            rows[t.technique] = {
                "data_mib": (t.peak_bytes - persistent) / MIB,
                "superneurons_mib": SUPERNEURONS_MIB.get(t.technique),
            }
            if t.technique != "baseline":  # the optimal plan at the heuristic's pool
                _, decided = planner.plan(t.peak_bytes)
                rows[t.technique].update(
                    optimal_data_mib=(decided.pool_bytes - persistent) / MIB,
                    optimal_predicted_ms=decided.predicted_seconds * 1e3,
                    optimal_gap=decided.gap,
                )
        for (recompute, offload), name in (
            (("none", "none"), "liveness"),
            (("cost-aware", "none"), "liveness + recompute"),
            (("none", "all"), "liveness + offload"),
            (("cost-aware", "all"), "all three"),
        ):
            planned = planner.make_heuristic(recompute, offload)
            rows[name]["predicted_ms"] = planner.seconds(planned) * 1e3
    result = {
        "persistent_mib": persistent / MIB,
        "planner_outside_mib": planner.outside / MIB,
        "optimal_smallest_data_mib": (smallest - persistent) / MIB,
        "optimal_proven_data_mib": (proven - persistent) / MIB,
        "techniques": rows,
    }
    print_alexnet(result)
    for name in ("liveness", "liveness + offload"):
        mib, paper = rows[name]["data_mib"], SUPERNEURONS_MIB[name]
        floors.check(f"AlexNet {name}: {mib:.3f} MiB <= SuperNeurons' {paper:.3f}", mib <= paper)
    mib, paper = result["optimal_smallest_data_mib"], SUPERNEURONS_MIB["all three"]
    floors.check(
        f"AlexNet optimal smallest: {mib:.5f} MiB <= SuperNeurons' {paper:.5f}", mib <= paper
    )
    return result


def print_alexnet(result):
    print(
        f"  data, no workspaces (MiB; persistent {result['persistent_mib']:.1f} MiB left out; "
        "times: the flop model)"
    )
    print(
        f"  {'technique':22} {'MiB':>9} {'SuperNeurons':>12} {'predicted':>10}   "
        f"{'optimal in that pool':>20} {'predicted':>10}"
    )
    for name, row in result["techniques"].items():
        paper = "-" if row["superneurons_mib"] is None else f"{row['superneurons_mib']:.3f}"
        line = f"  {name:22} {row['data_mib']:9.3f} {paper:>12}"
        if "predicted_ms" in row:
            line += f" {row['predicted_ms']:7.1f} ms"
        if "optimal_data_mib" in row:
            line += f"   {row['optimal_data_mib']:20.3f} {row['optimal_predicted_ms']:7.1f} ms"
        print(line)
    print(
        f"  {'optimal, smallest':22} {result['optimal_smallest_data_mib']:9.3f} "
        f"{SUPERNEURONS_MIB['all three']:12.3f}   (the solver proved >= "
        f"{result['optimal_proven_data_mib']:.3f})"
    )


# -- 3. the solver's time ---------------------------------------------------------------------
def solve_section(nets, floors):
    print("\nThe solver's time (planning device, flop model, batch 32, 3x32x32, 0.5 x liveness)")
    print(
        f"  {'net':12} {'nodes':>6} {'record s':>8} {'build s':>7} {'plan s':>7} "
        f"{'solve s':>7} {'rounds':>6} {'status':>10} {'gap':>7}"
    )
    results = {}
    for name, depth, block, limit in nets:
        model = create_model("resnet", depth=depth, block=block)
        planner, record_s, build_s = recorded_planner(
            model, (32, 3, 32, 32), device.create_planning_device()
        )
        liveness = pool_bytes_needed(planner.liveness, planner.device, True)
        row = {"depth": depth, "nodes": len(planner.recorded), "limit_s": limit}
        row.update(record_s=record_s, build_s=build_s)
        start = time.perf_counter()
        try:
            _, decided = planner.plan(int(0.5 * liveness), time_limit=limit)
        except NoPlanFits as error:
            row.update(feasible=False, smallest_mib=error.smallest / MIB)
        else:
            row.update(feasible=True, solve_s=decided.solve_seconds, rounds=decided.rounds)
            row.update(status=decided.status, gap=decided.gap)
        row["plan_s"] = time.perf_counter() - start
        results[name] = row
        print_solve(name, row)
        total = row["build_s"] + row["plan_s"]
        floors.check(
            f"{name}: build + plan {total:.1f} s <= {limit} s"
            + (f" (status {row['status']}, gap {row['gap']:.2%})" if row["feasible"] else ""),
            total <= limit,
        )
    return results


def print_solve(name, row):
    line = (
        f"  {name:12} {row['nodes']:6d} {row['record_s']:8.1f} {row['build_s']:7.1f} "
        f"{row['plan_s']:7.1f}"
    )
    if row["feasible"]:
        line += f" {row['solve_s']:7.1f} {row['rounds']:6d} {row['status']:>10} {row['gap']:7.2%}"
    else:
        line += f"  infeasible at 0.5 x liveness: smallest {row['smallest_mib']:.1f} MiB"
    print(line, flush=True)


# -- 4. the frontier --------------------------------------------------------------------------
def frontier_section(folder):
    dev = device.create_cpu_device(POOL, link_gbps=0.5)
    start = time.perf_counter()
    drawn = frontier(create_model("resnet", depth=56), (32, 3, 32, 32), device_=dev)
    path = os.path.join(folder, "frontier_resnet56.png")
    draw_frontier(drawn, path)
    print()
    print_frontier(drawn)
    seconds = time.perf_counter() - start
    print(f"  drawn to {path} ({seconds:.0f} s)")
    return {"png": path, "seconds": seconds, "points": len(drawn.points)}


# -- the run ----------------------------------------------------------------------------------
def existing_folder(text):
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder; create it first")
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test (see above)")
    parser.add_argument("--models", nargs="+", choices=list(NETS), default=list(NETS))
    parser.add_argument("--frontier-png", type=existing_folder, metavar="DIR")
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    start = time.perf_counter()
    floors = Floors()
    models, shares, links, rounds, solve_nets = args.models, SHARES, LINKS, ROUNDS, SOLVE_NETS
    if args.quick:
        models, shares, links, rounds, solve_nets = ["resnet20"], (0.7,), (2.0,), 3, SOLVE_NETS[:1]
    results = {"cpus": os.cpu_count(), "quick": args.quick, "measured": []}
    print(f"The optimal memory plan on {os.cpu_count()} CPUs (sizes MiB, times ms)")
    for key in models:
        for link in links:
            results["measured"].append(measure_net(NETS[key], link, shares, rounds, floors))
    results["alexnet"] = alexnet_section(floors)
    results["solve"] = solve_section(solve_nets, floors)
    if args.frontier_png:
        results["frontier"] = frontier_section(args.frontier_png)
    results["floors"] = {"lines": floors.lines, "failed": len(floors.failed)}
    results["wall_s"] = time.perf_counter() - start
    print(f"\n{len(floors.lines) - len(floors.failed)} floors passed, {len(floors.failed)} failed")
    for line in floors.failed:
        print(f"  {line}")
    print(f"wall time {results['wall_s']:.0f} s")
    emit_json(results, args.json)
    return 1 if floors.failed else 0


if __name__ == "__main__":
    sys.exit(main())
