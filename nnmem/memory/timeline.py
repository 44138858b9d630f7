"""Memory timelines: bytes in use and live tensors at every position of an iteration, for each
technique, as data and as a plot (SuperNeurons' Figure 10 shape).

An eager timeline is measured: the device samples the pool after every kernel call. A graph
timeline is computed from its static plan: persistent bytes plus the slots live at that
position of the replay order; its `tensors` can then say which tensors those are
(CompiledStep.live_tensors(): what the memory viewer, viewer.py, shows on a click).

The peak of a timeline is the pool's: the highest sample of a measured one. A planned step
holds its whole arena all step long, gaps between slots included, so its peak is
persistent + arena bytes (`pool_peak`), which can be more than the curve's top: the figure a
table of plans prints as "peak".

A planned step's lower bound (`lower_bound`) is the curve's top: its persistent bytes
(parameters, optimizer state, inputs, results) + the most intermediate bytes live at once
(the arena's lower bound, memory/layout.py:lower_bound). No layout of the plan's slots,
whatever their offsets, holds fewer bytes. It is the one figure that nnmem calls "lower
bound": the CLI, the plots, their JSON, the memory viewer and CompiledStep.memory_summary()
print this one.
"""


class Timeline:
    def __init__(self, label, names, bytes_in_use, live_tensors, pool_peak=None, lower_bound=None):
        self.label, self.names = label, list(names)
        self.bytes, self.live = list(bytes_in_use), list(live_tensors)
        # a planned timeline's pool peak (persistent + arena bytes) and lower bound (persistent
        # + the arena's lower bound, see the module's docstring); None for a measured one
        self.pool_peak, self.lower_bound = pool_peak, lower_bound
        # a planned timeline's tensors (CompiledStep.live_tensors()), for the viewer; None
        # for a measured one (the pool's samples say how much, not which tensors)
        self.tensors = None

    @classmethod
    def from_samples(cls, label, samples):
        """From a device's timeline list of (name, allocated bytes, live blocks)."""
        names, bytes_in_use, live = zip(*samples) if samples else ((), (), ())
        return cls(label, names, bytes_in_use, live)

    @property
    def peak(self):
        """The pool's peak over the step (see the module's docstring)."""
        top = max(self.bytes, default=0)
        return top if self.pool_peak is None else max(top, self.pool_peak)

    def peak_position(self):
        """(position, operation name) where the curve is highest (for a planned step: where
        the live bytes reach the lower bound)."""
        position = max(range(len(self.bytes)), key=self.bytes.__getitem__)
        return position, self.names[position]

    def as_dict(self):
        """The curves and the figures, plain data for JSON (lower_bound_bytes: None when
        measured)."""
        return {
            "label": self.label,
            "names": self.names,
            "bytes": self.bytes,
            "live": self.live,
            "peak_bytes": self.peak,
            "lower_bound_bytes": self.lower_bound,
        }


def _figure(figsize, layout=None):
    """A matplotlib Figure made without pyplot: no backend is chosen and no global state is
    touched, so plotting from nnmem never changes the user's matplotlib settings (a notebook
    with `%matplotlib inline` displays the returned figure). layout: matplotlib's layout
    engine ("constrained" makes room for legends outside the axes, see legend_below)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            "plotting needs matplotlib: pip install matplotlib (in nnmem's checkout: "
            "pip install '.[plot]')"
        ) from e
    return Figure(figsize=figsize, layout=layout)


def legend_below(ax, **options):
    """The legend of `ax`, under its x axis and its tick labels, outside the data: a legend
    inside the axes hides whatever passes behind it, and where the curves go depends on the
    model. Its figure needs a constrained layout (_figure(..., layout="constrained")) to make
    room for it."""
    from matplotlib.transforms import offset_copy

    below_ticks = offset_copy(ax.transAxes, fig=ax.figure, y=-20, units="points")
    return ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, 0),
        bbox_transform=below_ticks,
        fontsize="small",
        **options,
    )


def draw_lanes(ax, lanes, title):
    """Draw one step's compute and copy lanes (TransferEngine.lanes(): (lane, name, start,
    end) in seconds) on a matplotlib axis: where copies ran beside compute, and where compute
    stopped to wait for them."""
    rows = {"compute": (10, "tab:blue"), "copy": (0, "tab:orange")}
    for lane, (y, color) in rows.items():
        spans = [
            (start * 1e3, (end - start) * 1e3) for kind, _, start, end in lanes if kind == lane
        ]
        ax.broken_barh(spans, (y, 8), color=color)
    ax.set_yticks([4, 14], ["copy", "compute"])
    ax.set_xlabel("milliseconds into the step")
    ax.set_title(title, fontsize="medium")


# One line style per curve, in turn, each a little thinner than the one before: two
# techniques that plan alike draw the same curve, and a thin dashed one over a thick solid one
# shows both.
_STYLES = ("-", "--", "-.", ":", (0, (3, 1, 1, 1, 1, 1)))


def _style(index):
    return {"linestyle": _STYLES[index % len(_STYLES)], "linewidth": max(2.2 - 0.3 * index, 1.0)}


def plot_timelines(
    timelines,
    path=None,
    lower_bound=None,
    title="memory during one iteration",
    lanes=None,
    log_scale=False,
    lower_bound_of=None,
):
    """A figure of bytes in use per position (top) and live tensors per position (below it),
    one curve per Timeline, with one legend for both under the top panel (outside the data);
    with `lanes` ({label: TransferEngine.lanes()}), a panel of compute and copy lanes for each.
    lower_bound: bytes, drawn as a dashed line: a planned Timeline's `lower_bound`, whose
    label `lower_bound_of` names in the legend. Written to `path` as PNG when given; returned
    either way. log_scale: the bytes on a log axis, so that a baseline many times the others
    does not squash their curves."""
    lanes = lanes or {}
    fig = _figure((9, 6.5 + 0.2 * len(timelines) + 2 * len(lanes)), layout="constrained")
    axes = fig.subplots(2 + len(lanes), 1, sharex=False)
    top, bottom = axes[0], axes[1]
    for ax, (label, step_lanes) in zip(axes[2:], lanes.items()):
        draw_lanes(ax, step_lanes, label)
    for index, t in enumerate(timelines):
        label = f"{t.label} (peak {t.peak / 2**20:.1f} MiB"
        if t.peak > max(t.bytes, default=0):  # a planned arena with gaps: say what is live
            label += f" with the arena's gaps, {max(t.bytes) / 2**20:.1f} MiB live"
        (line,) = top.plot([b / 2**20 for b in t.bytes], label=label + ")", **_style(index))
        bottom.plot(t.live, color=line.get_color(), **_style(index))
    if lower_bound is not None:
        whose = f" of {lower_bound_of}" if lower_bound_of is not None else ""
        top.axhline(
            lower_bound / 2**20,
            color="black",
            linewidth=0.9,
            linestyle=(0, (8, 4)),
            label=f"lower bound{whose}: {lower_bound / 2**20:.1f} MiB "
            "(persistent + most intermediate bytes live at once)",
        )
    if log_scale:
        top.set_yscale("log")
    top.set_ylabel("MiB in use" + (" (log scale)" if log_scale else ""))
    top.set_title(title)
    legend_below(top)
    bottom.set_ylabel("live tensors")
    bottom.set_xlabel("position in the iteration (kernel calls, forward then backward)")
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
