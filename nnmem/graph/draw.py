"""A compiled step as a picture: Graphviz DOT text, or a matplotlib drawing (no Graphviz).

Both show the same graph. A node is one operation of the step (a kernel call, or a copy or
a release that offloading added); an edge is a dependency (schedule.py): solid for data
(read after write: the node reads what the other wrote last), dashed for order only (write
after read, write after write, and the control edges that keep a recomputation in backward).

- colour: the kind of the first block the operation writes, its output (liveness.py):
  input, parameter (an optimizer update), intermediate (an activation, a gradient, a
  workspace: what the plan recycles), end (a result Python holds: the output, the loss),
  host (an offloaded copy); white if it writes nothing;
- shape: the phase (forward, backward, recompute, update), or the copy stream;
- liveness: the bytes of intermediates live while the operation runs (the planned timeline
  less the persistent bytes), and the tensors whose last use it is (freed after it). The
  drawing makes a marker's area the live bytes; both mark the peak.

The drawing lays the graph out in layers, as Graphviz's `dot` does but without its crossing
minimisation: a node's layer is the longest path to it from a node with no predecessor (so
every edge goes down), and in its layer a node sits near the mean place of its
predecessors.
"""

from nnmem.graph.liveness import END, HOST, INPUT, INTERMEDIATE, PARAMETER
from nnmem.graph.schedule import bfs_order, dependencies
from nnmem.memory.timeline import _figure  # a Figure without pyplot
from nnmem.memory.units import format_bytes

#: Fill colour of an operation, by the kind of the first block it writes.
KIND_COLOURS = {
    INPUT: "#9ecae1",
    PARAMETER: "#fdae6b",
    INTERMEDIATE: "#a1d99b",
    END: "#bcbddc",
    HOST: "#d9d9d9",
}
NO_WRITE = "#ffffff"  # an operation that writes nothing (offloading's release marker)

#: (Graphviz shape, matplotlib marker) by phase; a copy (offloading) by its stream.
SHAPES = {
    "forward": ("ellipse", "o"),
    "backward": ("box", "s"),
    "recompute": ("triangle", "^"),
    "update": ("hexagon", "h"),
    "copy": ("cds", ">"),
}

#: Matplotlib line styles of the two kinds of edge.
EDGE_STYLES = {True: {"color": "#555555"}, False: {"color": "#c8c8c8", "linestyle": "--"}}


def written_kind(step, node):
    """The kind of the first block `node` writes, or None if it writes nothing."""
    return step.kinds[id(node.writes[0].block)] if node.writes else None


def colour(step, node):
    kind = written_kind(step, node)
    return NO_WRITE if kind is None else KIND_COLOURS[kind]


def _shape(node):
    """(Graphviz shape, matplotlib marker) of `node`."""
    return SHAPES["copy" if node.stream == "copy" else node.phase]


def edges(nodes):
    """[(j, i, data)] for every dependency of node i on node j (schedule.dependencies);
    `data` is True for a read after write (i reads a block j wrote last), False for an
    order-only edge."""
    data = set()
    predecessors = dependencies(nodes, data)
    return [(j, i, (j, i) in data) for i, before in enumerate(predecessors) for j in sorted(before)]


def layers(predecessors):
    """layer[i]: the length of the longest path to node i from a node with no predecessor,
    in one loop over a topological order (no recursion: a deep network has long paths)."""
    layer = [0] * len(predecessors)
    for i in bfs_order(range(len(predecessors)), predecessors):
        layer[i] = max((layer[j] + 1 for j in predecessors[i]), default=0)
    return layer


def positions(nodes, predecessors):
    """{node index: (x, y)}: y = -layer (the first layer on top); in each layer the nodes are
    ordered by the mean x of their predecessors, one unit apart, centred on 0."""
    layer = layers(predecessors)
    by_layer = {}
    for i in range(len(nodes)):
        by_layer.setdefault(layer[i], []).append(i)
    x = {}
    for depth in sorted(by_layer):  # the predecessors of a layer are all placed already
        wish = {}
        for i in by_layer[depth]:
            before = [x[j] for j in predecessors[i]]
            wish[i] = sum(before) / len(before) if before else 0.0
        members = sorted(by_layer[depth], key=lambda i: (wish[i], i))
        for k, i in enumerate(members):
            x[i] = k - (len(members) - 1) / 2
    return {i: (x[i], -layer[i]) for i in range(len(nodes))}


def liveness(step):
    """{node index: (bytes of intermediates live while it runs, [descriptions of the tensors
    whose last use it is])}, from the plan's slots and their live ranges."""
    freed = {}
    for slot in step.slots:
        for block, (_, last) in zip(slot.blocks, slot.ranges):
            freed.setdefault(last, []).append(block.desc)
    in_use = step.timeline.bytes
    return {
        i: (in_use[p] - step.persistent_bytes, freed.get(p, [])) for p, i in enumerate(step.order)
    }


def _peak(live):
    """The node at which the most bytes are live (the first in index order on a tie)."""
    return max(sorted(live), key=lambda i: live[i][0], default=None)


def _quote(text):
    """`text` as a DOT string: quotes and backslashes escaped, line breaks as \\n."""
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n") + '"'


def to_dot(step):
    """Graphviz DOT text of the compiled `step`: one node ``n<index>`` per operation of
    ``step.nodes`` (labelled with its place in the replay order, its name, the bytes live
    while it runs and how many tensors die after it; the peak drawn thick), one edge per
    dependency, and a legend of the colours. Graphviz renders it: ``dot -Tsvg step.dot``."""
    live = liveness(step)
    peak = _peak(live)
    position = {i: p for p, i in enumerate(step.order)}
    lines = [
        f"digraph {_quote(step.label)} {{",
        "  rankdir=TB;",
        '  node [style="filled", fontname="Helvetica", fontsize=10];',
        '  edge [color="#555555", arrowsize=0.6];',
    ]
    for i, node in enumerate(step.nodes):
        live_bytes, dying = live[i]
        label = f"{position[i]}: {node.name}\nlive {format_bytes(live_bytes)}"
        if dying:
            label += f", frees {len(dying)}"
        tooltip = "frees: " + ", ".join(dying) if dying else node.phase
        attributes = [
            f"label={_quote(label)}",
            f"shape={_shape(node)[0]}",
            f"fillcolor={_quote(colour(step, node))}",
            f"tooltip={_quote(tooltip)}",
        ]
        if i == peak:
            attributes.append('penwidth=3, xlabel="peak"')
        lines.append(f"  n{i} [{', '.join(attributes)}];")
    for j, i, data in edges(step.nodes):
        lines.append(
            f"  n{j} -> n{i};" if data else f'  n{j} -> n{i} [style=dashed, color="#aaaaaa"];'
        )
    lines.append('  subgraph cluster_legend { label="first block written"; fontsize=10;')
    for kind, fill in KIND_COLOURS.items():
        legend = f"label={_quote(kind)}, shape=box, fillcolor={_quote(fill)}"
        lines.append(f"    kind_{kind} [{legend}];")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def draw(step, ax=None, labels=True, title=None):
    """A matplotlib Figure of the compiled `step` (or the figure of `ax`, drawn on it): one
    marker per operation, coloured by the kind of block it writes, shaped by its phase, its
    area the bytes live while it runs; data edges solid, order-only ones dashed; the peak
    pointed at. Needs matplotlib, not Graphviz; uses no pyplot state."""
    from matplotlib.collections import LineCollection

    nodes = step.nodes
    dependency_edges = edges(nodes)
    predecessors = [set() for _ in nodes]
    for j, i, _ in dependency_edges:
        predecessors[i].add(j)
    place = positions(nodes, predecessors)
    rows = [y for _, y in place.values()]
    width = max((rows.count(y) for y in set(rows)), default=1)
    height = 1 - min(rows, default=0)
    if ax is None:
        fig = _figure((min(2.0 + 3.4 * width, 18), min(1.2 + 0.38 * height, 30)))
        ax = fig.subplots()
        fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.96)
    for data, style in EDGE_STYLES.items():
        segments = [(place[j], place[i]) for j, i, d in dependency_edges if d == data]
        ax.add_collection(LineCollection(segments, linewidths=0.8, zorder=1, **style))
    live = liveness(step)
    _draw_nodes(ax, step, place, live)
    if labels:
        position = {i: p for p, i in enumerate(step.order)}
        for i, node in enumerate(nodes):
            text = f"{position[i]} {node.name}"
            if live[i][1]:
                text += f"  (frees {len(live[i][1])})"
            ax.annotate(text, place[i], xytext=(9, 3), textcoords="offset points", fontsize=7)
    _legend(ax, step)
    xs = [x for x, _ in place.values()] or [0]
    ax.set_xlim(min(xs) - 0.25, max(xs) + 0.9)
    ax.set_ylim(0.4 - height, 0.8)
    ax.set_axis_off()
    ax.set_title(title or f"{step.label}: {len(nodes)} operations (marker area: bytes live)")
    return ax.figure


def _draw_nodes(ax, step, place, live):
    """One scatter per marker shape, one marker per node; an arrow to the peak."""
    top = max((b for b, _ in live.values()), default=0) or 1
    by_marker = {}
    for i, node in enumerate(step.nodes):
        by_marker.setdefault(_shape(node)[1], []).append(i)
    for marker, members in by_marker.items():
        ax.scatter(
            [place[i][0] for i in members],
            [place[i][1] for i in members],
            s=[30 + 370 * live[i][0] / top for i in members],
            c=[colour(step, step.nodes[i]) for i in members],
            marker=marker,
            edgecolors="#333333",
            linewidths=0.6,
            zorder=2,
        )
    peak = _peak(live)
    if peak is not None:
        ax.annotate(
            f"peak: {format_bytes(live[peak][0])} live",
            place[peak],
            xytext=(12, -14),
            textcoords="offset points",
            fontsize=8,
            color="darkred",
            arrowprops={"arrowstyle": "-", "color": "darkred"},
        )


def _legend(ax, step):
    """The colours (kinds written), shapes (phases) and edge styles this step uses."""
    from matplotlib.lines import Line2D

    kinds = {written_kind(step, node) for node in step.nodes}
    shapes = {_shape(node) for node in step.nodes}
    dot = {"linestyle": "", "markeredgecolor": "#333333"}
    handles = [
        Line2D([], [], marker="o", markerfacecolor=fill, label=kind, **dot)
        for kind, fill in KIND_COLOURS.items()
        if kind in kinds
    ]
    handles += [
        Line2D([], [], marker=marker, markerfacecolor="#bbbbbb", label=phase, **dot)
        for phase, (shape, marker) in SHAPES.items()
        if (shape, marker) in shapes
    ]
    handles += [
        Line2D([], [], linewidth=0.8, label="data" if data else "order only", **style)
        for data, style in EDGE_STYLES.items()
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper right", title="writes / phase / edge")
