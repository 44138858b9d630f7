"""Every figure nnmem draws agrees with every other, and can be read.

- One lower bound: what `nnmem train --timeline` prints, the JSON beside its plot, the memory
  viewer's data and CompiledStep.memory_summary() give the same figure (persistent bytes + the
  most intermediate bytes live at once); so do `nnmem plan`'s table, its JSON and its viewer.
- One list of techniques: a plot (FILE.png, its JSON) and the viewer (FILE.html) of the same
  command show the same rows.
- No legend hides data: a legend's box, on the drawn figure, holds no point of any curve, line
  or bar of any panel, and lies inside the figure.
"""

import contextlib
import io
import json
import re

import numpy as np
import pytest

from nnmem.cli import main
from nnmem.memory import format_bytes
from nnmem.memory.viewer import read_viewer_data

matplotlib = pytest.importorskip("matplotlib", reason="plotting needs matplotlib")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

import nnmem.cli.timeline as cli_timeline  # noqa: E402
from nnmem.memory.timeline import plot_timelines  # noqa: E402

TRAIN = ["train", "--model", "cnn", "--batch", "16", "--epochs", "1", "--max-batches", "1"]
OFFLOAD = ["--offload", "all", "--link-gbps", "1"]


def run(argv):
    """(exit status, stdout) of one nnmem command."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    return status, out.getvalue()


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib figures the CLI draws while the test runs (plot_timelines' results)."""
    drawn = []

    def plot(*args, **kwargs):
        drawn.append(plot_timelines(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(cli_timeline, "plot_timelines", plot)
    return drawn


# -- a legend that covers data -----------------------------------------------------------------


def _dense(points, per_segment=25):
    """The points of a polyline and of its segments between them (display coordinates): a line
    may cross a box with no vertex inside it (an axhline has two)."""
    if len(points) < 2:
        return points
    steps = np.linspace(0.0, 1.0, per_segment, endpoint=False)[:, None, None]
    start, end = points[:-1], points[1:]
    inner = (start + steps * (end - start)).reshape(-1, 2)
    return np.vstack([inner, points[-1:]])


def _inside(points, box):
    x, y = points[:, 0], points[:, 1]
    return (x >= box.x0) & (x <= box.x1) & (y >= box.y0) & (y <= box.y1)


def legend_overlaps(fig):
    """[(legend's first entry, what it covers)]: each curve, line or bar of any panel of `fig`
    that has a drawn point inside a legend's box; and each legend not wholly inside the
    figure. Empty for a figure whose legends hide nothing."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # the layout places the legends
    renderer = canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    legends += list(fig.legends)
    assert legends, "the figure has no legend to check"
    found = []
    for legend in legends:
        name = legend.get_texts()[0].get_text()
        box = legend.get_window_extent(renderer)
        if not fig.bbox.contains(box.x0, box.y0) or not fig.bbox.contains(box.x1, box.y1):
            found.append((name, "the figure's edge"))
        for ax in fig.axes:
            panel = ax.get_window_extent(renderer)
            for line in ax.get_lines():
                points = _dense(line.get_transform().transform(line.get_xydata()))
                drawn = points[_inside(points, panel)]  # what lies outside the axes is clipped
                if _inside(drawn, box).any():
                    found.append((name, line.get_label()))
            for collection in ax.collections:
                for path in collection.get_paths():
                    extent = path.get_extents(collection.get_transform())
                    if extent.overlaps(box) and extent.overlaps(panel):
                        found.append((name, f"a bar of {ax.get_title()!r}"))
    return found


def test_the_legend_of_nnmem_plan_covers_no_curve(tmp_path, figures):
    """The legend used to sit inside the top panel, over the baseline's rise to its peak."""
    assert run(["plan", "--model", "cnn", "--timeline", str(tmp_path / "x.png")])[0] == 0
    (fig,) = figures
    assert legend_overlaps(fig) == []


def test_the_legend_of_nnmem_train_with_offloading_covers_no_curve(tmp_path, figures):
    """The legend used to cover steps 30-60 of the offload curve, and the lower bound's line."""
    assert run(TRAIN + OFFLOAD + ["--timeline", str(tmp_path / "x.png")])[0] == 0
    (fig,) = figures
    assert len(fig.axes) == 4  # memory, live tensors, the sync and async lanes
    assert legend_overlaps(fig) == []


def test_tutorial_03s_log_scale_plot_covers_no_curve():
    """Tutorial 03's figure: three planned techniques of ResNet-56 on a log axis (its legend
    used to sit over the curves' rise)."""
    from nnmem.models import create_model
    from nnmem.planning import plan

    shape = (32, 3, 32, 32)
    step = plan(create_model("resnet", depth=56), shape, recompute="cost-aware", offload="none")
    fig = plot_timelines([t.timeline for t in step.techniques], log_scale=True)
    assert legend_overlaps(fig) == []


def test_the_check_sees_a_legend_over_a_curve():
    """The check itself: a legend drawn inside the axes over a line is found."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], label="diagonal")
    ax.legend(loc="center")
    assert legend_overlaps(fig) == [("diagonal", "diagonal")]


# -- one lower bound, one list of techniques ---------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """nnmem train --timeline, with offloading, once as a plot and once as the viewer: (the
    printed lines, the plot's JSON, the viewer's data) of each."""
    folder = tmp_path_factory.mktemp("figures")
    png_status, png_out = run(TRAIN + OFFLOAD + ["--timeline", str(folder / "step.png")])
    html_status, html_out = run(TRAIN + OFFLOAD + ["--timeline", str(folder / "step.html")])
    assert png_status == html_status == 0
    data = json.loads((folder / "step.json").read_text())
    return png_out, html_out, data, read_viewer_data(folder / "step.html")


def test_train_prints_writes_and_shows_one_lower_bound(trained):
    png_out, html_out, data, viewer = trained
    printed = re.findall(r"lower bound of graph \(BFS\): (\S+ \S+) = (\S+ \S+) persistent", png_out)
    assert printed, png_out
    plan = data["plan"]  # CompiledStep.memory_summary()
    bound = data["lower_bound_bytes"]
    assert data["lower_bound_of"] == viewer["selected"] == "graph (BFS)"
    assert printed == [(format_bytes(bound), format_bytes(plan["persistent_bytes"]))]
    assert plan["lower_bound_bytes"] == bound
    assert bound == plan["persistent_bytes"] + plan["arena_lower_bound_bytes"]
    timelines = {t["label"]: t for t in data["timelines"]}
    techniques = {t["label"]: t for t in viewer["techniques"]}
    assert timelines["graph (BFS)"]["lower_bound_bytes"] == bound
    assert techniques["graph (BFS)"]["lower_bound_bytes"] == bound
    assert max(timelines["graph (BFS)"]["bytes"]) == bound  # the curve's top: what is live
    # the viewer's run printed the same line
    assert f"lower bound of graph (BFS): {format_bytes(bound)} =" in html_out
    assert not re.search(r"lower bound \d", png_out)  # no other figure of that name


def test_train_plots_and_shows_the_same_techniques(trained):
    _, _, data, viewer = trained
    plotted = [t["label"] for t in data["timelines"]]
    shown = [t["label"] for t in viewer["techniques"]]
    assert plotted == shown
    assert "graph + recompute (cost-aware)" in plotted and "graph + offload (all)" in plotted
    assert set(data["lanes"]) == set(viewer["lanes"])
    for plot, page in zip(data["timelines"], viewer["techniques"]):
        assert plot["lower_bound_bytes"] == page["lower_bound_bytes"]
        assert plot["peak_bytes"] == page["peak_bytes"]


def test_plan_prints_writes_and_shows_one_lower_bound(tmp_path):
    argv = ["plan", "--model", "cnn", "--batch", "16"]
    status, out = run(argv + ["--timeline", str(tmp_path / "x.png")])
    assert status == 0 and run(argv + ["--timeline", str(tmp_path / "x.html")])[0] == 0
    data = json.loads((tmp_path / "x.json").read_text())
    viewer = read_viewer_data(tmp_path / "x.html")
    assert [t["label"] for t in data["timelines"]] == [t["label"] for t in viewer["techniques"]]
    # the table's lower bound column, technique by technique
    size = r"[\d,]+(?:\.\d+)? (?:B|KiB|MiB|GiB)"
    rows = dict(re.findall(rf"^  (\S.*?)\s{{2,}}{size}\s+({size})\s", out, re.M))
    for plot, page in zip(data["timelines"], viewer["techniques"]):
        assert plot["lower_bound_bytes"] == page["lower_bound_bytes"]
        assert reads_as(rows[page["label"]], page["lower_bound_bytes"]), (rows, page["label"])
    liveness = next(t for t in viewer["techniques"] if t["label"] == "liveness")
    assert data["lower_bound_bytes"] == liveness["lower_bound_bytes"]
    assert data["lower_bound_of"] == viewer["selected"] == "liveness"


def reads_as(text, n):
    """Whether a size printed as `text` ("8.56 MiB", "1,024.0 KiB", "512 B") is `n` bytes,
    rounded to the decimals printed."""
    number, unit = text.split()
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    decimals = len(number.partition(".")[2])
    return f"{n / scale:,.{decimals}f}" == number


def test_a_compiled_step_summary_and_timeline_give_one_lower_bound():
    from training import planned_step

    step = planned_step("cnn", (16, 1, 28, 28))
    summary = step.memory_summary()
    assert summary["lower_bound_bytes"] == step.timeline.lower_bound == max(step.timeline.bytes)
    assert summary["arena_lower_bound_bytes"] == step.layout.lower_bound
    assert summary["lower_bound_bytes"] == step.persistent_bytes + step.layout.lower_bound
    assert summary["arena_bytes"] >= summary["arena_lower_bound_bytes"]
