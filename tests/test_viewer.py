"""The memory viewer (nnmem/memory/viewer.py): one self-contained HTML file whose data is the
plan's, checked structurally, then in a real browser (Debian's Chromium driven by Playwright):
the page loads with no error, and a click at the peak lists the tensors the plan holds there.

The browser tests store screenshots in test-artifacts/ at the top of the checkout (git ignores
it), for a person to look at; they skip, saying why, where Playwright or Chromium is missing.
"""

import importlib.util
import json
import os
import pathlib
import re
import shlex
from typing import NamedTuple

import numpy as np
import pytest
from training import planned_step

from nnmem.cli import main
from nnmem.memory import OutOfMemory, Pool, format_bytes
from nnmem.memory.timeline import Timeline
from nnmem.memory.viewer import read_viewer_data, write_viewer

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("NNMEM_CHROMIUM", "/usr/bin/chromium")
# What the page may name: the SVG namespace is an identifier, never fetched.
SVG_NAMESPACE = "http://www.w3.org/2000/svg"
#: (label, recompute policy, offload policy) of the planned techniques under test.
VARIANTS = [
    ("liveness", "none", "none"),
    ("recompute", "memory", "none"),
    ("offload", "none", "all"),
]


class Planned(NamedTuple):
    """A technique's timeline (with its tensors) and what its compiled step says, position by
    position: the descriptions of the blocks live there (from the slots' own ranges; two
    blocks may share one, a forward output and its gradient), the bytes of the slots live
    there."""

    timeline: object
    live: list
    arena_bytes: list
    persistent_bytes: int


@pytest.fixture(scope="module")
def planned():
    """{label: Planned} for SINGA's CNN at batch 16, planned on a planning device (no kernel
    runs) with each of VARIANTS. At batch 16 the liveness arena has gaps: its pool's peak is
    above its curve's top."""
    step = planned_step("cnn", (16, 1, 28, 28), sequential=False)
    found = {}
    for label, recompute, offload in VARIANTS:
        step.replan(False, recompute, offload)
        timeline = step.timeline
        timeline.label, timeline.tensors = label, step.live_tensors()
        positions = range(len(step.order))
        live = [
            sorted(
                block.desc
                for s in step.slots
                for block, (first, last) in zip(s.blocks, s.ranges)
                if first <= p <= last
            )
            for p in positions
        ]
        arena_bytes = [
            sum(s.nbytes for s in step.slots if s.first <= p <= s.last) for p in positions
        ]
        found[label] = Planned(timeline, live, arena_bytes, step.persistent_bytes)
    return found


@pytest.fixture(scope="module")
def page(planned, tmp_path_factory):
    """The viewer of the planned techniques, with lanes (copy, compute, stall) beside them."""
    path = tmp_path_factory.mktemp("viewer") / "plan.html"
    lanes = {
        "async offload (all)": [
            ("compute", "conv1:Conv2d", 0.0, 0.002),
            ("copy", "offload:conv1:ReLU (4, 20, 24, 24) float32", 0.001, 0.004),
            ("stall", "prefetch of conv1:ReLU </script> (4, 20, 24, 24) float32", 0.004, 0.005),
        ]
    }
    timelines = [p.timeline for p in planned.values()]
    write_viewer(path, timelines, "cnn, batch 16 <planned>", lanes=lanes, selected="liveness")
    return path


# -- the file ----------------------------------------------------------------------------------


def test_the_viewer_is_one_file_that_fetches_nothing(page):
    text = page.read_text()
    assert text.count("<html") == 1 and text.rstrip().endswith("</html>")
    for value in re.findall(r"""\b(?:src|href)\s*=\s*["']?([^"'\s>]*)""", text, re.I):
        assert value.startswith(("data:", "#")), value  # nothing from the network, nor a file
    assert set(re.findall(r"https?://[^\s\"'<>)]*", text)) == {SVG_NAMESPACE}
    for fetching in ("<link rel=\"stylesheet", "@import", "url(", "fetch(", "XMLHttpRequest",
                     "import(", "<iframe", "<img"):  # fmt: skip
        assert fetching not in text, fetching
    # a name holding "</script>" stays inside the data element
    assert text.count("</script>") == 2 and "&lt;planned&gt;" in text


def test_the_data_is_inlined_and_is_the_plans(page, planned):
    data = read_viewer_data(page)
    inline = re.search(r'<script id="nnmem-data" type="application/json">(.*?)</script>',
                       page.read_text(), re.S).group(1)  # fmt: skip
    assert json.loads(inline) == data  # plain JSON, parseable by anything
    assert [t["label"] for t in data["techniques"]] == list(planned)
    assert data["selected"] == "liveness"
    assert data["lanes"]["async offload (all)"][2][1].startswith("prefetch of conv1:ReLU </script>")
    for shown, p in zip(data["techniques"], planned.values()):
        assert shown["bytes"] == p.timeline.bytes and shown["names"] == p.timeline.names
        assert shown["tensors"] == json.loads(json.dumps(p.timeline.tensors))


@pytest.mark.parametrize("label", [label for label, _, _ in VARIANTS])
def test_the_tensors_live_at_the_peak_are_the_plans_and_sum_to_the_curve(page, planned, label):
    data = {t["label"]: t for t in read_viewer_data(page)["techniques"]}[label]
    plan = data["tensors"]
    peak, _ = planned[label].timeline.peak_position()
    for p in sorted({0, peak, len(data["bytes"]) - 1}):
        rows = [r for r in plan["tensors"] if r[4] <= p <= r[5]]
        assert sorted(r[0] for r in rows) == planned[label].live[p]
        slots = {r[3] for r in rows}
        assert slots == {i for i, s in enumerate(plan["slots"]) if s[2] <= p <= s[3]}
        arena = sum(plan["slots"][i][0] for i in slots)
        assert arena == planned[label].arena_bytes[p]
        assert plan["persistent_bytes"] + arena == data["bytes"][p]  # the curve's value


def test_every_position_sums_to_the_curve_and_the_outside_is_the_persistent_blocks(planned):
    for p in planned.values():
        plan = p.timeline.tensors
        for position, value in enumerate(p.timeline.bytes):
            assert p.persistent_bytes + p.arena_bytes[position] == value
        # the blocks outside the arena, each rounded up to the pool's alignment, are all of it
        rounded = sum(-(-max(b[2], 1) // 256) * 256 for b in plan["persistent"])
        assert rounded == plan["persistent_bytes"]
        assert {b[3] for b in plan["persistent"]} == {"parameter", "input", "end"}


def test_the_flags_say_what_each_technique_did(planned):
    flags = {
        label: {f for row in p.timeline.tensors["tensors"] for f in row[6]}
        for label, p in planned.items()
    }
    assert flags["liveness"] == {"in place"}
    assert "recomputed" in flags["recompute"] and "offloaded" not in flags["recompute"]
    assert {"offloaded", "prefetched"} <= flags["offload"] and "recomputed" not in flags["offload"]
    offload = planned["offload"].timeline.tensors
    assert len(offload["host"]) == sum("offloaded" in row[6] for row in offload["tensors"]) > 0
    # a prefetched copy has the shape its kernels read, not the transfer's bytes
    prefetched = [row for row in offload["tensors"] if "prefetched" in row[6]]
    assert all(len(row[1]) > 1 or row[1][0] * 4 == row[2] for row in prefetched)


# -- the commands ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_page(tmp_path_factory):
    """nnmem train --timeline X.html with offloading: measured curves, the graph's plan and its
    recompiled variants, lanes. (Module scope: it measures five real steps.) --pool 8MiB fits
    training (6.4 MiB) but not the step measured with no recycling (10.9 MiB): the measurement
    takes a pool of its own."""
    path = tmp_path_factory.mktemp("train") / "step.html"
    argv = ["train", "--model", "cnn", "--batch", "8", "--epochs", "1", "--max-batches", "1"]
    argv += ["--pool", "8MiB"]
    assert main(argv + ["--offload", "all", "--link-gbps", "4", "--timeline", str(path)]) == 0
    return path


def test_train_writes_the_viewer(trained_page, capsys):
    data = read_viewer_data(trained_page)
    labels = [t["label"] for t in data["techniques"]]
    assert labels == [
        "no recycling",
        "eager",
        "graph (BFS)",
        "graph + recompute (cost-aware)",
        "graph + offload (all)",
    ]
    planned = [t["label"] for t in data["techniques"] if t["tensors"] is not None]
    assert planned == labels[2:] and data["selected"] == "graph (BFS)"
    for t in data["techniques"][2:]:
        plan = t["tensors"]
        position = max(range(len(t["bytes"])), key=t["bytes"].__getitem__)
        live = [s for s in plan["slots"] if s[2] <= position <= s[3]]
        assert plan["persistent_bytes"] + sum(s[0] for s in live) == t["bytes"][position]
    assert set(data["lanes"]) == {"sync offload (all)", "async offload (all)"}
    for calls in data["lanes"].values():
        assert {"compute", "copy"} <= {lane for lane, *_ in calls}
        assert all(0 <= start <= end for _, _, start, end in calls)
    assert not (trained_page.parent / "step.json").exists()  # the data is in the page


def bound(technique):
    """A planned technique's lower bound, as the page shows it (its Timeline's): persistent
    bytes + the arena's lower bound (the most intermediate bytes live at once)."""
    tensors = technique["tensors"]
    assert technique["lower_bound_bytes"] == (
        tensors["persistent_bytes"] + tensors["arena_lower_bound_bytes"]
    )
    return technique["lower_bound_bytes"]


def test_plan_writes_the_viewer_of_every_technique(tmp_path, capsys):
    path = tmp_path / "plan.html"
    assert (
        main(
            [
                "plan",
                "--model",
                "cnn",
                "--batch",
                "16",
                "--input",
                "1x28x28",
                "--timeline",
                str(path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"memory viewer written to {path}: open it in a browser" in out
    data = read_viewer_data(path)
    assert [t["label"] for t in data["techniques"]] == [
        "baseline",
        "liveness",
        "liveness + recompute",
        "liveness + offload (all)",
        "all three (all)",
    ]
    assert all(t["tensors"] for t in data["techniques"]) and data["selected"] == "liveness"
    # the same step as the printed table: its techniques' peaks (the pool's: persistent bytes
    # and the whole arena, its gaps included) and lower bounds
    size = r"[\d,]+(?:\.\d+)? (?:B|KiB|MiB|GiB)"
    rows = re.findall(rf"^  (\S.*?)\s{{2,}}({size})\s+({size})\s", out, re.M)
    assert [label for label, _, _ in rows] == [t["label"] for t in data["techniques"]]
    for (_, peak, lower_bound), t in zip(rows, data["techniques"]):
        assert reads_as(peak, t["peak_bytes"]) and reads_as(lower_bound, bound(t)), rows


def reads_as(text, n):
    """Whether a size the table prints as `text` ("8.56 MiB", "1,024.0 KiB", "512 B") is `n`
    bytes, rounded to the decimals printed."""
    number, unit = text.split()
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    decimals = len(number.partition(".")[2])
    return f"{n / scale:,.{decimals}f}" == number


def test_plan_after_a_search_writes_the_viewer_of_what_it_found(tmp_path, capsys):
    path = tmp_path / "found.html"
    argv = ["plan", "--model", "mlp", "--budget", "4MiB", "--find-batch"]
    assert main(argv + ["--offload", "none", "--timeline", str(path)]) == 0
    batch = re.search(r"largest batch that fits 4\.0 MiB: (\d+)", capsys.readouterr().out)[1]
    data = read_viewer_data(path)
    assert data["title"].startswith(f"MLP, input {batch}x1x28x28")  # the step it found
    assert [t["label"] for t in data["techniques"]] == [
        "baseline",
        "liveness",
        "liveness + recompute",
    ]
    assert all(t["tensors"] for t in data["techniques"])


def test_the_viewer_needs_no_matplotlib(tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec

    def without_matplotlib(name, *args, **kwargs):
        return None if name == "matplotlib" else find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_matplotlib)
    argv = ["plan", "--model", "mlp", "--batch", "4", "--offload", "none", "--timeline"]
    assert main(argv + [str(tmp_path / "plan.png")]) == 2
    assert "matplotlib" in capsys.readouterr().err
    assert main(argv + [str(tmp_path / "plan.html")]) == 0
    assert read_viewer_data(tmp_path / "plan.html")["selected"] == "liveness"


@pytest.mark.parametrize("name", ["timeline", "timeline.json", "timeline.htm", "timeline."])
def test_timeline_takes_a_png_or_html_path_only(capsys, tmp_path, name):
    for command in ("train", "plan"):
        assert main([command, "--model", "mlp", "--timeline", str(tmp_path / name)]) == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"nnmem {command}: error: argument --timeline: ")
        assert str(tmp_path / "timeline.html") in line and str(tmp_path / "timeline.png") in line
        assert list(tmp_path.iterdir()) == []


def test_out_of_memory_says_how_to_open_the_viewer(capsys, tmp_path):
    pool = Pool(4096)
    with pytest.raises(OutOfMemory, match="memory viewer") as info:
        pool.alloc(8192)
    assert "nnmem plan --model M --batch B --input CxHxW --timeline oom.html" in str(info.value)
    # On the command line the note names this run's own plan; that command works.
    argv = ["train", "--model", "mlp", "--epochs", "1", "--max-batches", "1", "--pool", "256KiB"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    note = re.search(r"to see which tensors .* in a browser: (nnmem plan .*)$", err, re.M)
    command = note[1]
    assert command == "nnmem plan --model mlp --batch 64 --input 1x28x28 --timeline oom.html"
    path = tmp_path / "oom.html"
    assert main(shlex.split(command)[1:-1] + [str(path)]) == 0
    assert read_viewer_data(path)["techniques"][1]["label"] == "liveness"


# -- in a real browser -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, driven by Playwright; skipped, saying why, without them."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install -e '.[test]')"
    )
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set NNMEM_CHROMIUM)")
    with sync_api.sync_playwright() as playwright:
        args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--disable-quic"]  # fmt: skip
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield launched
        launched.close()


def open_page(browser, path):
    """(page, problems): `path` opened; problems collects console errors, uncaught exceptions
    and any request for something other than the file itself."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    url = path.as_uri()
    page.on("request", lambda r: r.url != url and problems.append(f"request: {r.url}"))
    page.goto(url)
    page.wait_for_selector("#live-rows tr")
    return page, problems


def click_operation(page, position, positions):
    """A mouse click on the chart at operation `position` (of `positions` on the x axis), in
    the right part of its band: anywhere in the band is that operation."""
    box = page.locator("#chart-overlay").bounding_box()
    x = box["x"] + (position + 0.75) * box["width"] / positions
    page.mouse.click(x, box["y"] + box["height"] / 2)


def shown_names(page):
    return sorted(page.locator("#live-rows td.name").all_text_contents())


def screenshot(page, name):
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def test_in_a_browser_a_click_at_the_peak_lists_the_tensors_live_there(browser, page, planned):
    view, problems = open_page(browser, page)
    liveness = planned["liveness"]
    peak, operation = liveness.timeline.peak_position()
    positions = max(len(p.timeline.bytes) for p in planned.values())
    assert view.locator("#detail").get_attribute("data-position") == str(peak)  # opens there
    click_operation(view, 0, positions)
    assert view.locator("#detail").get_attribute("data-position") == "0"
    assert shown_names(view) == liveness.live[0]
    click_operation(view, peak, positions)
    detail = view.locator("#detail")
    assert detail.get_attribute("data-position") == str(peak)
    assert detail.get_attribute("data-technique") == "liveness"
    assert view.locator("#operation").text_content() == operation
    assert shown_names(view) == liveness.live[peak]
    total = int(view.locator("#total").get_attribute("data-bytes"))
    assert total == liveness.timeline.bytes[peak]
    # the arena strip draws one bar per slot live there
    live_slots = {r[3] for r in liveness.timeline.tensors["tensors"] if r[4] <= peak <= r[5]}
    assert view.locator("#strip rect.slot").count() == len(live_slots)
    # another technique: a click on its row shows its tensors at its own peak
    view.locator('#techniques tr[data-technique="2"]').click()
    offload = planned["offload"]
    offload_peak, _ = offload.timeline.peak_position()
    assert detail.get_attribute("data-technique") == "offload"
    assert detail.get_attribute("data-position") == str(offload_peak)
    assert shown_names(view) == offload.live[offload_peak]
    assert view.locator("#lanes rect.lane-stall").count() == 1
    view.keyboard.press("ArrowLeft")
    assert detail.get_attribute("data-position") == str(offload_peak - 1)
    view.locator('#techniques tr[data-technique="0"]').click()
    click_operation(view, peak, positions)
    # the techniques' table says each pool's peak, as memory_stats() would measure it (the
    # whole arena, gaps included), not the top of its curve
    cells = view.locator("#techniques tbody tr td:nth-child(4)").all_text_contents()
    assert cells == [format_bytes(p.timeline.peak) for p in planned.values()]
    assert not problems, problems
    screenshot(view, "memory-viewer-plan.png")


def test_in_a_browser_the_train_viewer_loads_with_its_lanes(browser, trained_page):
    view, problems = open_page(browser, trained_page)
    data = read_viewer_data(trained_page)
    graph = data["techniques"][2]
    peak = max(range(len(graph["bytes"])), key=graph["bytes"].__getitem__)
    assert view.locator("#detail").get_attribute("data-position") == str(peak)
    expected = sorted(r[0] for r in graph["tensors"]["tensors"] if r[4] <= peak <= r[5])
    assert shown_names(view) == expected
    assert view.locator("#lanes svg").count() == 2
    assert view.locator("#lanes rect.lane-copy").count() > 0
    assert view.locator("path.curve").count() == 5
    view.locator("#chart-overlay").hover()
    assert view.locator("#tip").is_visible()
    assert not problems, problems
    screenshot(view, "memory-viewer-train.png")


def test_a_measured_timeline_alone_still_draws(browser, tmp_path):
    path = tmp_path / "measured.html"
    write_viewer(path, [Timeline("eager", ["a", "b"], [10, 20], [1, 2])], "measured only")
    page = browser.new_page()
    problems = []
    page.on("console", lambda m: m.type == "error" and problems.append(m.text))
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(path.as_uri())
    assert "no planned technique" in page.locator("#detail").text_content().lower()
    assert page.locator("path.curve").count() == 1 and not problems, problems
    assert read_viewer_data(path)["selected"] is None


def test_in_a_browser_a_curve_far_above_the_selected_one_starts_unticked(
    browser, planned, tmp_path
):
    """A baseline many times the selected technique's peak would squash its curve flat: it
    starts unticked (not drawn), and ticking it draws it."""
    liveness = planned["liveness"].timeline
    huge = Timeline("no recycling", liveness.names, [5 * b for b in liveness.bytes], liveness.live)
    path = tmp_path / "squash.html"
    write_viewer(path, [huge, liveness], "squash", selected="liveness")
    view, problems = open_page(browser, path)
    boxes = view.locator("#techniques tbody input[type=checkbox]")
    assert [boxes.nth(i).is_checked() for i in range(2)] == [False, True]
    assert view.locator("path.curve").count() == 1
    boxes.nth(0).check()
    assert view.locator("path.curve").count() == 2
    assert not problems, problems


def test_the_writer_refuses_an_empty_timeline_and_takes_numpy_numbers(tmp_path):
    """An empty timeline drew a curve through NaN; a title of None and a NumPy byte count
    stopped the writer (an AttributeError, a TypeError from JSON)."""
    with pytest.raises(ValueError, match=r"\['x'\] have no operation"):
        write_viewer(tmp_path / "empty.html", [Timeline("x", [], [], [])], "empty")
    path = tmp_path / "numpy.html"
    write_viewer(path, [Timeline("x", ["a"], [np.int64(512)], [1])], None)
    data = read_viewer_data(path)
    assert data["title"] == "None" and data["techniques"][0]["bytes"] == [512]
