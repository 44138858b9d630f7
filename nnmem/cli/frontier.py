"""nnmem plan --frontier FILE.png: the time/memory Pareto curve of the optimal plan, with every
heuristic drawn as a point on the same axes (nnmem.planning.frontier), and the table of it.

Both axes come from one definition each: the pool a plan needs (its placed layout, what the
pool would hold) and the cost model's time of the step (graph/costs.plan_seconds), the same
for the optimal plans and for the heuristics, so a heuristic above the curve is slower than
the optimal plan at its own memory, and one right of the curve needs more memory at its speed.
"""

import json

import numpy as np

from nnmem import planning
from nnmem.cli.arguments import format_shape
from nnmem.cli.progress import Progress
from nnmem.memory import format_bytes

#: Markers for the heuristics, by offload policy; colours and sizes by recompute policy: hollow
#: and of different sizes, so that heuristics that make the same plan show as rings, not one
#: hiding the other.
MARKERS = {"none": "o", "conv": "s", "all": "^"}
COLOURS = {
    "none": "tab:gray",
    "speed": "tab:orange",
    "memory": "tab:green",
    "cost-aware": "tab:red",
}
SIZES = {"none": 220, "speed": 140, "cost-aware": 70, "memory": 25}


def write_frontier(args, model, input_shape):
    """nnmem plan --frontier: the frontier of `model` (new, uninitialised) training on batches
    of `input_shape`, printed, and drawn to the file --frontier names."""
    with Progress("plan", f"the frontier of {args.model}, input {format_shape(input_shape)}") as p:
        frontier = planning.frontier(
            model,
            input_shape,
            dtype=np.dtype(args.dtype),
            progress=p.stage,
            link_gbps=args.link_gbps,
        )
    print()
    print_frontier(frontier)
    draw_frontier(frontier, args.frontier)
    print(f"  frontier drawn to {args.frontier} (its data: beside it, .json)")


def print_frontier(frontier):
    """The frontier as a table on stdout: per budget the optimal plan (predicted: played on
    the compute and copy clocks; the program's bound and gap are in the program's own model of
    the step, graph/milp.py; plan: the solver's, or a heuristic's that played faster), then
    the heuristics."""
    print(
        f"{frontier.model}, input {'x'.join(map(str, frontier.input_shape))}: the optimal plan "
        f"per budget (times from the cost model: {frontier.cost_source}; the step with no "
        f"technique {frontier.step_seconds * 1e3:.1f} ms)"
    )
    print(
        f"  {'budget':>10}  {'pool':>10}  {'predicted':>10}  {'program bound':>13}  {'gap':>6}  "
        f"{'recomputed':>10}  {'offloaded':>9}  {'kept':>5}  plan"
    )
    for p in frontier.points:
        print(
            f"  {format_bytes(p.budget):>10}  {format_bytes(p.peak_bytes):>10}  "
            f"{p.predicted_seconds * 1e3:8.1f} ms  {p.lower_bound_seconds * 1e3:10.1f} ms  "
            f"{p.gap:6.2%}  {p.recomputed:>10}  {p.offloaded:>9}  {p.kept:>5}  {p.source}"
        )
    print(
        f"  smallest pool of the optimal plan: {format_bytes(frontier.smallest_bytes)} (the solver "
        f"proved every plan has at least {format_bytes(frontier.proven_bytes)} in the pool at "
        "its peak)"
    )
    print("  the heuristics, on the same axes:")
    for h in sorted(frontier.heuristics, key=lambda h: -h.peak_bytes):
        print(
            f"    {h.technique:36} {format_bytes(h.peak_bytes):>10}  "
            f"{h.predicted_seconds * 1e3:8.1f} ms"
        )


def draw_frontier(frontier, path):
    """Draw the frontier to `path` (PNG) and write its data beside it (same name, .json)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mib = 2**20
    fig, ax = plt.subplots(figsize=(10, 5.5))
    points = sorted(frontier.points, key=lambda p: p.peak_bytes)
    ax.step(
        [p.peak_bytes / mib for p in points],
        [p.predicted_seconds * 1e3 for p in points],
        where="post",
        color="tab:blue",
        marker="o",
        label="optimal plan (per budget)",
        zorder=3,
    )
    ax.axvline(
        frontier.proven_bytes / mib,
        color="tab:blue",
        linestyle=":",
        label="every plan has at least this much in the pool at its peak (solver's bound)",
    )
    for h in frontier.heuristics:
        recompute = "none"
        offload = "none"
        for part in h.technique.split(" + "):
            kind, _, policy = part.partition(" ")
            if kind == "recompute":
                recompute = policy
            elif kind == "offload":
                offload = policy
        ax.scatter(
            h.peak_bytes / mib,
            h.predicted_seconds * 1e3,
            marker=MARKERS[offload],
            facecolors="none",
            edgecolors=COLOURS[recompute],
            linewidths=1.8,
            s=SIZES[recompute],
            label=h.technique,
            zorder=4,
        )
    ax.set_xlabel("pool the plan needs (MiB)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title(
        f"{frontier.model} {'x'.join(map(str, frontier.input_shape))}: time against memory "
        f"(cost model: {frontier.cost_source})"
    )
    ax.grid(alpha=0.3)
    # beside the axes, never over the data
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    with open(path.rsplit(".", 1)[0] + ".json", "w") as f:
        json.dump(frontier_json(frontier), f, indent=1)


def frontier_json(frontier):
    """The frontier as plain data (what the figure and the table show)."""
    return {
        "model": frontier.model,
        "input_shape": list(frontier.input_shape),
        "cost_source": frontier.cost_source,
        "step_seconds": frontier.step_seconds,
        "persistent_bytes": frontier.persistent_bytes,
        "smallest_bytes": frontier.smallest_bytes,
        "proven_bytes": frontier.proven_bytes,
        "points": [p._asdict() for p in frontier.points],
        "heuristics": [h._asdict() for h in frontier.heuristics],
    }
