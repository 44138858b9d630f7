"""The memory viewer: one training step's memory, technique by technique, as ONE HTML file
that a browser opens from disk, with no network and no library (PyTorch's memory_viz shows
which blocks were allocated; nnmem knows the graph, so the viewer can also say why).

What the page shows (viewer.html, beside this file, draws it with a small script):
- the bytes in use at every operation of the step, one curve per technique (measured eager
  curves and planned graph curves alike: memory/timeline.py's Timelines), and the lower
  bound of the technique shown below (Timeline.lower_bound: persistent + the most
  intermediate bytes live at once, the figure the CLI and the plots print);
- with offloading, each traced step's compute and copy lanes and the compute stream's
  stalls (TransferEngine.lanes());
- for a planned technique (a Timeline whose ``tensors`` CompiledStep.live_tensors() filled),
  a click on any operation lists the tensors live there (name, shape, bytes, the operation
  that made it, the last one that uses it, offloaded / prefetched / recomputed / in place),
  the bytes outside the arena, and the arena's layout: where each live slot sits, at that
  operation and over the whole step. It opens at the technique's peak.

The data is inlined as JSON in a <script type="application/json"> element, so the file is
also a data file: ``read_viewer_data(path)`` gives it back.
"""

import html
import importlib.resources
import json
import re

import numpy as np

_DATA = re.compile(r'<script id="nnmem-data" type="application/json">(.*?)</script>', re.S)
_PLACEHOLDER = re.compile(r"__TITLE__|__DATA__")


def _page():
    """The page's text, package data (installed beside this module)."""
    return importlib.resources.files("nnmem.memory").joinpath("viewer.html").read_text("utf-8")


def viewer_data(timelines, title, lanes=None, selected=None):
    """The dict the page draws: the title, each Timeline as {label, names, bytes, live,
    peak_bytes, lower_bound_bytes, tensors} (peak_bytes: Timeline.peak, the pool's peak, which
    for a planned step counts the arena's gaps and so may exceed the curve's top;
    lower_bound_bytes: Timeline.lower_bound; lower_bound_bytes and tensors are None for a
    measured timeline), `lanes` as {label: [[lane, name, start, end], ...]} (seconds from the
    step's start), and the label of the technique whose tensors the page shows first
    (`selected`, default: the first with tensors)."""
    empty = [t.label for t in timelines if not t.names]
    if empty:  # the page would draw a curve through no point (NaN coordinates)
        raise ValueError(f"the timelines {empty} have no operation: there is nothing to draw")
    techniques = [
        {
            "label": t.label,
            "names": t.names,
            "bytes": t.bytes,
            "live": t.live,
            "peak_bytes": t.peak,
            "lower_bound_bytes": t.lower_bound,
            "tensors": t.tensors,
        }
        for t in timelines
    ]
    labels = [t["label"] for t in techniques if t["tensors"] is not None]
    if selected is not None and selected not in labels:
        raise ValueError(f"selected={selected!r}: choose a planned technique, one of {labels}")
    return {
        "title": str(title),
        "techniques": techniques,
        "lanes": {label: [list(call) for call in calls] for label, calls in (lanes or {}).items()},
        "selected": selected if selected is not None else (labels[0] if labels else None),
    }


def write_viewer(path, timelines, title, lanes=None, selected=None):
    """Write the viewer of `timelines` (and `lanes`, see viewer_data) to `path`, one HTML file."""
    data = viewer_data(timelines, title, lanes, selected)
    # JSON inside <script>: "</script>" in a name would end the element; \u003c is still "<"
    # to JSON.parse. Strings only: numbers and keys never hold these characters.
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, default=_plain)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    # one pass: a title that spells a placeholder is not filled in again
    fill = {"__TITLE__": html.escape(data["title"]), "__DATA__": text}
    page = _PLACEHOLDER.sub(lambda m: fill[m.group(0)], _page())
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def _plain(value):
    """A NumPy number (a byte count from an array) as the Python number JSON writes."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"the viewer's data holds a {type(value).__name__}, which JSON cannot write")


def read_viewer_data(path):
    """The data a viewer file holds (viewer_data's dict), read back from its HTML."""
    with open(path, encoding="utf-8") as f:
        match = _DATA.search(f.read())
    if match is None:
        raise ValueError(f"{path} is not a memory viewer written by nnmem (no data element)")
    return json.loads(match.group(1))
