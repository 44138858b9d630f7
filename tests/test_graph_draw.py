"""A compiled step as DOT text and as a matplotlib drawing (nnmem/graph/draw.py): one node per
operation, every edge between declared nodes, colours by the kind of block written, the
liveness the plan says, and a layered layout in which every edge goes down."""

import re
import shutil
import subprocess

import pytest
from training import planned_step

from nnmem.graph import draw
from nnmem.graph.schedule import dependencies

NODE = re.compile(r"^  (n\d+) \[(.*)\];$")
EDGE = re.compile(r"^  (n\d+) -> (n\d+)( \[.*\])?;$")


def compiled(recompute="none", name="mlp", shape=(4, 1, 8, 8), **kwargs):
    """A tiny model's step, recorded and planned on a planning device (nothing runs)."""
    return planned_step(name, shape, kwargs, recompute=recompute)


def parse(dot):
    """({node id: attribute text}, [(source, target, attribute text)]) of to_dot's lines."""
    nodes, edges = {}, []
    for line in dot.splitlines():
        if match := NODE.match(line):
            nodes[match[1]] = match[2]
        elif match := EDGE.match(line):
            edges.append((match[1], match[2], match[3] or ""))
    return nodes, edges


@pytest.mark.parametrize("recompute", ["none", "memory"])
def test_dot_has_one_node_per_operation_and_every_dependency(recompute):
    step = compiled(recompute, "cnn", (2, 1, 28, 28))
    dot = step.to_dot()
    assert dot.startswith("digraph ") and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}")
    nodes, edges = parse(dot)
    assert sorted(nodes) == sorted(f"n{i}" for i in range(len(step.nodes)))
    assert all(a in nodes and b in nodes for a, b, _ in edges)
    expected = {
        (f"n{j}", f"n{i}") for i, before in enumerate(dependencies(step.nodes)) for j in before
    }
    assert {(a, b) for a, b, _ in edges} == expected and len(edges) == len(expected)
    # data edges (read after write: i reads a block whose last writer before i is j) solid,
    # the others dashed
    writers = {}  # block id -> the nodes that write it, in recording order
    for node in step.nodes:
        for spec in node.writes:
            writers.setdefault(id(spec.block), []).append(node.index)

    def reads_what_it_wrote(j, i):
        return any(
            max((w for w in writers.get(id(spec.block), ()) if w < i), default=None) == j
            for spec in step.nodes[i].reads
        )

    for j, i, data in draw.edges(step.nodes):
        assert data == reads_what_it_wrote(j, i), (j, i)
        (attributes,) = [s for a, b, s in edges if (a, b) == (f"n{j}", f"n{i}")]
        assert ("dashed" in attributes) != data
    phases = {node.phase for node in step.nodes}
    assert ("recompute" in phases) == (recompute != "none")


def test_dot_colours_follow_the_kind_of_block_written_and_labels_say_the_liveness():
    step = compiled()
    nodes, _ = parse(step.to_dot())
    seen = set()
    position = {i: p for p, i in enumerate(step.order)}
    for i, node in enumerate(step.nodes):
        kind = step.kinds[id(node.writes[0].block)]
        seen.add(kind)
        attributes = nodes[f"n{i}"]
        assert f'fillcolor="{draw.KIND_COLOURS[kind]}"' in attributes
        assert f'label="{position[i]}: {node.name}\\nlive ' in attributes
    # the MLP's step writes intermediates (activations, gradients), parameters (the updates)
    # and ends (the output and the loss, which Python holds)
    assert seen == {"intermediate", "parameter", "end"}
    live = draw.liveness(step)
    for i, (live_bytes, dying) in live.items():
        p = position[i]
        assert live_bytes == step.timeline.bytes[p] - step.persistent_bytes
        dead = [b.desc for s in step.slots for b, r in zip(s.blocks, s.ranges) if r[1] == p]
        assert sorted(dying) == sorted(dead)
        assert (f", frees {len(dying)}" in nodes[f"n{i}"]) == bool(dying)
    peak = max(live, key=lambda i: live[i][0])
    assert "penwidth=3" in nodes[f"n{peak}"]
    assert max(b for b, _ in live.values()) == step.layout.lower_bound


def test_layers_are_the_longest_paths_and_need_no_recursion():
    step = compiled()
    predecessors = dependencies(step.nodes)
    layer = draw.layers(predecessors)
    for i, before in enumerate(predecessors):
        assert layer[i] == max((layer[j] + 1 for j in before), default=0)
    chain = [set()] + [{i - 1} for i in range(1, 20_000)]  # deeper than any recursion limit
    assert draw.layers(chain)[-1] == 19_999


def test_drawing_has_one_marker_per_operation():
    pytest.importorskip("matplotlib", reason="drawing needs matplotlib: pip install matplotlib")
    from matplotlib.collections import PathCollection
    from matplotlib.figure import Figure

    step = compiled("memory", "cnn", (2, 1, 28, 28))
    figure = draw.draw(step)
    assert isinstance(figure, Figure)
    markers = [c for c in figure.axes[0].collections if isinstance(c, PathCollection)]
    assert sum(len(c.get_offsets()) for c in markers) == len(step.nodes)
    places = draw.positions(step.nodes, dependencies(step.nodes))
    drawn = sorted(tuple(xy) for c in markers for xy in c.get_offsets().tolist())
    assert drawn == sorted(places.values())
    assert all(places[j][1] > places[i][1] for j, i, _ in draw.edges(step.nodes))  # down


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graphviz_renders_the_dot_text(tmp_path):
    path = tmp_path / "step.dot"
    path.write_text(compiled().to_dot())
    done = subprocess.run(["dot", "-Tsvg", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "<svg" in done.stdout
