"""AlexNet at batch 200 (3x227x227, float32): peak memory of baseline, liveness, liveness +
recomputation, liveness + offload, all three and the optimal plan's smallest, planned on
shapes alone, beside SuperNeurons' measured 2189 / 1489 / 1132 / 886 MB (section 4.1: baseline,
liveness, liveness + offload with CONV layers as checkpoints, all three; it reports no figure
for recomputation alone). nnmem offloads with offload="all" here (every activation backward
reads). SuperNeurons' MB are MiB (2**20 bytes): its 886.23 is exactly four of conv1's outputs,
4 x 200x96x55x55 floats = 4 x 221.56 MiB, the working set of LRN1's backward (x, y, dy, dx).
Every figure here is in MiB.

    python bench/plan.py [--json out.json] [--no-scale]

It then times the planner on a ResNet of about 10,000 layers (ImageNet stem, depth 3752:
1,250 bottleneck blocks, 11,266 layer objects; batch 16, 3x224x224); SuperNeurons trained
ResNet-2500, about 10^4 layers. The issue's bound: under a minute on the 2-core machine.

SuperNeurons counts data tensors (forward outputs and their gradients). nnmem's pool holds
more, so three views are printed:
- full: everything a training step keeps in the pool (parameters, momentum, gradients,
  the batch, convolution workspaces, activations): what the pool must hold;
- data: the same minus the persistent bytes (parameters, optimizer state, inputs, results);
- data, no workspaces: with direct convolutions (no im2col workspace), the closest to what
  SuperNeurons counts (it allocates workspaces separately, from memory left free).
"""

import argparse
import time

from train import emit_json

import nnmem.ops.conv as conv_op
from nnmem.cli.arguments import output_file
from nnmem.models import create_model
from nnmem.planning import frontier as optimal_frontier
from nnmem.planning import plan

SUPERNEURONS_MB = {
    "baseline": 2189.437,
    "liveness": 1489.355,
    "liveness + offload": 1132.155,
    "all three": 886.23,
}


def alexnet_plan():
    return plan(create_model("alexnet"), (200, 3, 227, 227), recompute="cost-aware")


def alexnet_smallest():
    """The smallest pool of AlexNet's optimal plan (keep, recompute or offload per tensor,
    weight gradients included: graph/optimal.py) and the solver's bound on it."""
    found = optimal_frontier(create_model("alexnet"), (200, 3, 227, 227), budgets=[])
    return found.smallest_bytes, found.proven_bytes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    parser.add_argument("--no-scale", action="store_true", help="skip the 10,000-layer timing")
    args = parser.parse_args()
    full = alexnet_plan()
    limit = conv_op.WORKSPACE_LIMIT_BYTES
    conv_op.WORKSPACE_LIMIT_BYTES = 0  # no workspace fits: every convolution runs direct
    try:
        direct = alexnet_plan()
        smallest, proven = alexnet_smallest()
    finally:
        conv_op.WORKSPACE_LIMIT_BYTES = limit
    mb = 2**20
    rows = {}
    print("AlexNet, batch 200, 3x227x227, float32 (MiB = 2^20 bytes, SuperNeurons' unit)")
    print(
        f"  persistent (parameters, momentum, batch, results): {full.persistent_bytes / mb:.1f} MiB"
    )
    print(
        f"  {'technique':22} {'full':>9} {'data':>9} {'data, no ws':>12} {'SuperNeurons':>13}  "
        f"{'extra ops':>9}  peak at (data, no ws)"
    )
    for a, b in zip(full.techniques, direct.techniques):
        row = {
            "full_mib": a.peak_bytes / mb,
            "data_mib": (a.peak_bytes - full.persistent_bytes) / mb,
            "data_no_workspace_mib": (b.peak_bytes - direct.persistent_bytes) / mb,
            "superneurons_mib": SUPERNEURONS_MB.get(a.technique),
            "host_mib": a.host_bytes / mb,
            "recomputations": b.recomputations,
            "peak_at": b.peak_operation,
        }
        rows[a.technique] = row
        paper = row["superneurons_mib"]
        print(
            f"  {a.technique:22} {row['full_mib']:9.1f} {row['data_mib']:9.1f} "
            f"{row['data_no_workspace_mib']:12.1f} {'-' if paper is None else f'{paper:.1f}':>13}  "
            f"{row['recomputations']:9d}  {row['peak_at']}"
        )
    rows["optimal (smallest)"] = {
        "data_no_workspace_mib": (smallest - direct.persistent_bytes) / mb,
        "solver_bound_mib": (proven - direct.persistent_bytes) / mb,
        "superneurons_mib": SUPERNEURONS_MB["all three"],
    }
    print(
        f"  {'optimal (smallest)':22} {'':>9} {'':>9} "
        f"{rows['optimal (smallest)']['data_no_workspace_mib']:12.2f} "
        f"{SUPERNEURONS_MB['all three']:13.2f}  (keep, recompute or offload per tensor; the "
        f"solver's bound {rows['optimal (smallest)']['solver_bound_mib']:.2f})"
    )
    if not args.no_scale:
        start = time.perf_counter()
        deep = plan(
            create_model("resnet", depth=3752, stem="imagenet", num_classes=1000), (16, 3, 224, 224)
        )
        seconds = time.perf_counter() - start
        rows["resnet_3752"] = {
            "seconds": seconds,
            "recorded_operations": deep.nodes,
            "peaks_gib": {t.technique: t.peak_bytes / 2**30 for t in deep.techniques},
        }
        print(
            f"\nResNet-3752 (11,266 layers), batch 16, 3x224x224: planned in {seconds:.1f} s "
            f"({deep.nodes} recorded operations); peaks "
            + ", ".join(f"{t.technique} {t.peak_bytes / 2**30:.1f} GiB" for t in deep.techniques)
        )
    emit_json(rows, args.json)


if __name__ == "__main__":
    main()
