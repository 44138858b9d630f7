"""--timeline FILE, of nnmem train and nnmem plan: one step's memory per technique, written as a
plot (FILE.png, with the data beside it as JSON, FILE.json) or as the memory viewer (FILE.html:
one self-contained page; a click on an operation lists the tensors live there, see
nnmem/memory/viewer.py). The extension decides (arguments.timeline_path checks it).

nnmem plan writes the techniques it planned; nnmem train measures, before it trains, one step
run three ways on throwaway copies of its model, then replans the graph step with
recomputation (write_train_timeline). A plot and the viewer show the same techniques, and the
same lower bound: the selected technique's Timeline.lower_bound (memory/timeline.py).
"""

import functools
import importlib.util
import json
import os

from nnmem import device
from nnmem.cli.arguments import UsageError, format_shape, is_html
from nnmem.cli.factories import make_model
from nnmem.measure import measure_lanes, measure_step
from nnmem.memory import format_bytes
from nnmem.memory.timeline import plot_timelines
from nnmem.memory.units import parse_bytes
from nnmem.memory.viewer import write_viewer


def require_matplotlib(path, flag="--timeline"):
    """A PNG is plotted with matplotlib, an optional dependency: checked before any work, so
    that a missing one does not throw away the measurement it would have plotted. The viewer
    (.html) needs nothing."""
    if path is None or is_html(path) or importlib.util.find_spec("matplotlib") is not None:
        return
    viewer = (
        ", name an .html file (the memory viewer needs nothing)" if flag == "--timeline" else ""
    )
    raise UsageError(
        f"argument {flag}: plotting needs matplotlib, which is not installed; install "
        f"it with pip install matplotlib (in nnmem's checkout: pip install '.[plot]'){viewer}, "
        f"or leave out {flag}"
    )


def write_timeline(path, timelines, title, lower_bound, lanes=None, data=None, selected=None):
    """Write `timelines` (memory.timeline.Timeline, one per technique) to `path`: the memory
    viewer for an .html path (`selected`: the technique it shows first, with its lower bound),
    else a PNG plot with `lower_bound` (the selected technique's) and a JSON file beside it
    holding the curves, the lanes and `data`. Both get the same `timelines`."""
    lanes = lanes or {}
    if is_html(path):
        write_viewer(path, timelines, title, lanes=lanes, selected=selected)
        print(
            f"  memory viewer written to {path}: open it in a browser, and click an operation "
            "to list the tensors live there"
        )
        return
    plot_timelines(
        timelines, path, lower_bound=lower_bound, title=title, lanes=lanes, lower_bound_of=selected
    )
    data_path = os.path.splitext(path)[0] + ".json"
    with open(data_path, "w") as f:
        json.dump(
            {
                "lower_bound_bytes": lower_bound,
                "lower_bound_of": selected,
                **(data or {}),
                "timelines": [t.as_dict() for t in timelines],
                "lanes": lanes,
            },
            f,
        )
    print(f"  timeline written to {path} (data: {data_path})")


def write_plan_timeline(path, step):
    """nnmem plan --timeline: every technique of `step` (a StepPlan with its tensors), the
    viewer showing liveness first; a plot gets liveness's lower bound."""
    liveness = next(t for t in step.techniques if t.technique == "liveness")
    write_timeline(
        path,
        [t.timeline for t in step.techniques],
        f"{step.model}, input {format_shape(step.input_shape)}: memory of one training step, "
        "planned",
        lower_bound=liveness.lower_bound_bytes,
        selected="liveness",
    )


def measurement_pool(args):
    """The pool of the throwaway devices --timeline measures on: --pool caps training, but the
    step measured with no recycling needs more than a pool that fits training (the CNN at batch
    64: 52.7 MiB against 19.8), so they get at least the default pool (2 GiB)."""
    return None if args.pool is None else max(device.default_pool_bytes(), parse_bytes(args.pool))


#: The recomputation policy --timeline replans nnmem train's graph step with, for the plot and
#: the viewer alike.
TRAIN_RECOMPUTE = "cost-aware"


def write_train_timeline(args, x, y, num_classes):
    """nnmem train's --timeline: measure one step three ways on throwaway copies of the model,
    replan its graph step with TRAIN_RECOMPUTE (with offloading, measure its lanes too), and
    write a plot or the memory viewer of them all."""
    pool = measurement_pool(args)
    timelines, summary = measure_step(
        functools.partial(make_model, args, num_classes, x.shape[1]),
        x,
        y,
        pool,
        args.seed,
        recompute=TRAIN_RECOMPUTE,
    )
    width = max(len(t.label) for t in timelines.values())
    for t in timelines.values():
        position, name = t.peak_position()
        print(
            f"  {t.label:{width}} peak {format_bytes(t.peak):>10} at position {position} ({name})"
        )
    graph = timelines["graph"]
    print(f"  {lower_bound_lines(graph.label, summary)}")
    lanes = {}
    if args.offload not in ("none", "dyn") and not args.no_graph:
        lanes, offloaded = measure_lanes(
            functools.partial(make_model, args, num_classes, x.shape[1]),
            x,
            y,
            args.offload,
            pool,
            args.seed,
            args.link_gbps,
        )
        timelines["offload"] = offloaded
        print(f"  {offloaded.label}: peak {format_bytes(offloaded.peak)}")
        for label, step_lanes in lanes.items():
            copying = sum(end - start for lane, _, start, end in step_lanes if lane == "copy")
            length = max((end for *_, end in step_lanes), default=0.0)
            print(f"  {label}: step {1e3 * length:.1f} ms, copies {1e3 * copying:.1f} ms")
    write_timeline(
        args.timeline,
        list(timelines.values()),
        f"{args.model}, batch {len(x)}: memory during one training step",
        lower_bound=graph.lower_bound,
        lanes=lanes,
        data={"plan": summary},
        selected=graph.label,
    )


def lower_bound_lines(label, summary):
    """Two lines that say what the lower bound of the step `label` counts, from its
    CompiledStep.memory_summary(): persistent + the most intermediate bytes live at once."""
    return (
        f"lower bound of {label}: {format_bytes(summary['lower_bound_bytes'])} = "
        f"{format_bytes(summary['persistent_bytes'])} persistent + "
        f"{format_bytes(summary['arena_lower_bound_bytes'])} most intermediate bytes live at "
        f"once\n  (persistent: parameters, optimizer state, inputs, results; the arena of the "
        f"intermediates: {format_bytes(summary['arena_bytes'])})"
    )
