"""--timeline FILE, of nnmem train and nnmem plan: one step's memory per technique, written as a
plot (FILE.png, with the data beside it as JSON, FILE.json) or as the memory viewer (FILE.html:
one self-contained page; a click on an operation lists the tensors live there, see
nnmem/memory/viewer.py). The extension decides (arguments.timeline_path checks it)."""

import importlib.util
import json
import os

from nnmem.cli.arguments import UsageError, is_html
from nnmem.memory.timeline import plot_timelines
from nnmem.memory.viewer import write_viewer


def require_matplotlib(path):
    """A PNG is plotted with matplotlib, an optional dependency: checked before any work, so
    that a missing one does not throw away the measurement it would have plotted. The viewer
    (.html) needs nothing."""
    if path is None or is_html(path) or importlib.util.find_spec("matplotlib") is not None:
        return
    raise UsageError(
        "argument --timeline: plotting needs matplotlib, which is not installed; install "
        'it with pip install "nnmem[plot]" (or pip install matplotlib), name an .html file '
        "(the memory viewer needs nothing), or leave out --timeline"
    )


def write_timeline(path, timelines, title, lower_bound, lanes=None, data=None, selected=None):
    """Write `timelines` (memory.timeline.Timeline, one per technique) to `path`: the memory
    viewer for an .html path (`selected`: the technique it shows first), else a PNG plot with
    `lower_bound` and a JSON file beside it holding the curves, the lanes and `data`."""
    lanes = lanes or {}
    if is_html(path):
        write_viewer(path, timelines, title, lanes=lanes, selected=selected)
        print(
            f"  memory viewer written to {path}: open it in a browser, and click an operation "
            "to list the tensors live there"
        )
        return
    plot_timelines(timelines, path, lower_bound=lower_bound, title=title, lanes=lanes)
    data_path = os.path.splitext(path)[0] + ".json"
    with open(data_path, "w") as f:
        json.dump(
            {
                "lower_bound_bytes": lower_bound,
                **(data or {}),
                "timelines": [t.as_dict() for t in timelines],
                "lanes": lanes,
            },
            f,
        )
    print(f"  timeline written to {path} (data: {data_path})")
