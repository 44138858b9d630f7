"""Graph mode: numbers unchanged, memory against the no-recycling baseline, replay speed.

    python bench/graph.py [--iterations 30] [--windows 3] [--seconds 2] [--json out.json]

1. Identity: over `iterations` steps with the same seed and data, the losses and every
   parameter of eager, graph-serial and graph-BFS runs are compared bit for bit (seed CNN,
   MLP 784-256-256-10, ResNet-20).
2. Memory, ResNet-20 batch 32: the pool's peak during steady-state steps for the baseline
   (recycling off: every block kept until the step ends), eager, and graph; the static plan's
   arena against its lower bound LB. Two measures of "peak": allocated bytes (live tensors),
   and the high-water mark (the smallest pool that held the run, fragmentation included).
3. Speed: images/second of eager and graph replay (MLP, CNN), and PyTorch CPU on the CNN,
   measured alternately in the same run (ratios, not absolute times).
"""

import argparse

import numpy as np
from train import best_windows, emit_json, measure

from nnmem import device, opt, tensor
from nnmem.cli.arguments import output_file, positive_float, positive_int
from nnmem.memory import format_bytes
from nnmem.models import create_model

IDENTITY_CASES = {
    "cnn": (64, (1, 28, 28), {}),
    "mlp": (64, (1, 28, 28), {}),
    "resnet20": (32, (3, 32, 32), {"depth": 20}),
}


def run(name, iterations, use_graph, sequential=False, recycle=True, seed=0):
    """Train `iterations` steps; returns losses, final states and the device's peaks."""
    batch, shape, kwargs = IDENTITY_CASES[name]
    dev = device.create_cpu_device("2GiB")  # a device of its own: its peak is this run's
    dev.recycle = recycle
    dev.SetRandSeed(seed)
    model = create_model("resnet" if name == "resnet20" else name, **kwargs)
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    tx = tensor.PlaceHolder((batch,) + shape, dev)
    ty = tensor.PlaceHolder((batch,), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=use_graph, sequential=sequential)
    rng = np.random.default_rng(seed)
    losses = []
    for i in range(iterations):
        tx.copy_from_numpy(rng.random(tx.shape, dtype=np.float32))
        ty.copy_from_numpy(rng.integers(0, 10, batch).astype(np.int32))
        if i == 1:  # steady state: leave the first step (recording, lazy state) out
            dev.reset_peak_memory_stats()
        losses.append(float(tensor.to_numpy(model(tx, ty)[1])[0]))
    states = {k: tensor.to_numpy(v) for k, v in model.get_states().items()}
    stats = dev.memory_stats()
    compiled = model.compiled_step(tx, ty) if use_graph else None
    return losses, states, stats, compiled


def identical(a, b):
    return a[0] == b[0] and all(np.array_equal(a[1][k], b[1][k]) for k in a[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=positive_int, default=30)
    parser.add_argument("--windows", type=positive_int, default=3, help="timed windows per runner")
    parser.add_argument("--seconds", type=positive_float, default=2.0, help="length of one window")
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    out = {"identity": {}, "memory": {}, "speed": {}}

    print(f"1. identity over {args.iterations} iterations (losses and parameters, bit for bit)")
    for name in IDENTITY_CASES:
        eager = run(name, args.iterations, use_graph=False)
        for order, sequential in (("serial", True), ("bfs", False)):
            same = identical(eager, run(name, args.iterations, True, sequential))
            out["identity"][f"{name}_{order}"] = same
            print(f"   {name:9} {order:6} {'identical' if same else 'DIFFERENT'}")

    print("\n2. memory, ResNet-20 batch 32 (steady-state steps)")
    runs = {
        "baseline (recycling off)": run("resnet20", 3, True, recycle=False),
        "eager": run("resnet20", 3, False),
        "graph": run("resnet20", 3, True),
    }
    print(f"   {'':26} {'allocated peak':>15} {'high-water':>12}")
    for label, r in runs.items():
        s = r[2]
        out["memory"][label] = {
            "allocated_peak": s["allocated_bytes.peak"],
            "high_water": s["high_water_bytes"],
        }
        print(
            f"   {label:26} {format_bytes(s['allocated_bytes.peak']):>15} "
            f"{format_bytes(s['high_water_bytes']):>12}"
        )
    base, eager, graph = (out["memory"][k] for k in runs)
    summary = runs["graph"][3].memory_summary()
    for measure_name in ("allocated_peak", "high_water"):
        out["memory"][f"graph_over_baseline_{measure_name}"] = (
            graph[measure_name] / base[measure_name]
        )
        out["memory"][f"graph_over_eager_{measure_name}"] = (
            graph[measure_name] / eager[measure_name]
        )
    out["memory"]["plan"] = summary
    print(
        f"   graph / baseline: {graph['allocated_peak'] / base['allocated_peak']:.3f} allocated, "
        f"{graph['high_water'] / base['high_water']:.3f} high-water"
    )
    print(
        f"   graph / eager:    {graph['allocated_peak'] / eager['allocated_peak']:.3f} allocated, "
        f"{graph['high_water'] / eager['high_water']:.3f} high-water"
    )
    print(
        f"   static plan: arena {format_bytes(summary['arena_bytes'])}, the arena's lower bound "
        f"{format_bytes(summary['arena_lower_bound_bytes'])}, arena / that "
        f"{summary['arena_over_arena_lower_bound']:.4f}; "
        f"{summary['inplace_merges']} in-place merges"
    )

    print("\n3. speed, images/second (best of alternating windows, each runner its own process)")
    for name in ("mlp", "cnn"):
        runners = ("nnmem_eager", "nnmem_graph", "pytorch")
        speeds, _ = measure(name, runners, args.windows, args.seconds, warmup=3)
        r = best_windows(speeds)
        r["ratio_graph_vs_eager"] = r["nnmem_graph"] / r["nnmem_eager"]
        if "pytorch" in r:
            r["ratio_graph_vs_pytorch"] = r["nnmem_graph"] / r["pytorch"]
        out["speed"][name] = r
        torch_part = (
            (f"  pytorch {r['pytorch']:.0f}  graph/pytorch {r['ratio_graph_vs_pytorch']:.2f}")
            if "pytorch" in r
            else ""
        )
        print(
            f"   {name:4} eager {r['nnmem_eager']:.0f}  graph {r['nnmem_graph']:.0f}  "
            f"graph/eager {r['ratio_graph_vs_eager']:.2f}{torch_part}"
        )
    emit_json(out, args.json)


if __name__ == "__main__":
    main()
