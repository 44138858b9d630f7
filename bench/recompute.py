"""Recomputation policies (SuperNeurons' Table 1): extra recomputed operations and the peak
of speed-centric, memory-centric and cost-aware recomputation, for AlexNet, ResNet-50 and
ResNet-101 (ImageNet shapes, batch 16 as in SuperNeurons' Table 1 setting unless given).

    python bench/recompute.py [--batch 16] [--json out.json]

The claim checked: cost-aware reaches the memory-centric policy's peak with no more than
25% more recomputations than the speed-centric one (SuperNeurons: AlexNet 17 versus 14 and
23; ResNet-50 85 versus 84 and 118). Planned on shapes alone (nnmem.planning).
"""

import argparse

from train import emit_json

from nnmem.cli.arguments import output_file, positive_int
from nnmem.models import create_model
from nnmem.planning import plan

NETS = {
    "AlexNet": ("alexnet", {}, (3, 227, 227)),
    "ResNet-50": ("resnet", {"depth": 50, "stem": "imagenet", "num_classes": 1000}, (3, 224, 224)),
    "ResNet-101": (
        "resnet",
        {"depth": 101, "stem": "imagenet", "num_classes": 1000},
        (3, 224, 224),
    ),
}
SUPERNEURONS = {"AlexNet": (14, 23, 17), "ResNet-50": (84, 118, 85), "ResNet-101": (169, 237, 170)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=positive_int, default=16)
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    results = {}
    print(
        f"batch {args.batch}; recomputations (peak MiB: the step's lower bound); SuperNeurons' "
        "counts speed / memory / cost-aware in the last column"
    )
    print(
        f"{'net':11} {'speed-centric':>19} {'memory-centric':>19} {'cost-aware':>19}  "
        f"{'cost/speed':>10} {'reaches memory peak':>19}  SuperNeurons"
    )
    for name, (model, kwargs, sample) in NETS.items():
        row = {}
        for policy in ("speed", "memory", "cost-aware"):
            t = plan(
                create_model(model, **kwargs), (args.batch,) + sample, recompute=policy
            ).techniques[2]
            # The step's peak is its lower bound (what any plan needs at the busiest step); the
            # placed arena adds a placement margin that differs from plan to plan.
            row[policy] = {
                "recomputations": t.recomputations,
                "peak_bytes": t.lower_bound_bytes,
                "arena_peak_bytes": t.peak_bytes,
            }
        speed, memory, cost = row["speed"], row["memory"], row["cost-aware"]
        row["cost_over_speed"] = cost["recomputations"] / max(speed["recomputations"], 1)
        row["reaches_memory_peak"] = cost["peak_bytes"] <= memory["peak_bytes"]
        results[name] = row
        cells = "".join(
            f" {r['recomputations']:8d} ({r['peak_bytes'] / 2**20:7.1f})"
            for r in (speed, memory, cost)
        )
        print(
            f"{name:11}{cells}  {row['cost_over_speed']:10.2f} "
            f"{str(row['reaches_memory_peak']):>19}  {SUPERNEURONS[name]}"
        )
    emit_json(results, args.json)


if __name__ == "__main__":
    main()
