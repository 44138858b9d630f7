"""Memory timelines: bytes in use and live tensors at every position of an iteration, for each
technique, as data and as a plot (SuperNeurons' Figure 10 shape).

An eager timeline is measured: the device samples the pool after every kernel call. A graph
timeline is computed from its static plan: persistent bytes plus the slots live at that
position of the replay order; its `tensors` can then say which tensors those are
(CompiledStep.live_tensors(): what the memory viewer, viewer.py, shows on a click).

The peak of a timeline is the pool's: the highest sample of a measured one. A planned step
holds its whole arena all step long, gaps between slots included, so its peak is
persistent + arena bytes (`pool_peak`), which can be more than the curve's top (persistent
+ the lower bound): the figure a table of plans prints as "peak".
"""


class Timeline:
    def __init__(self, label, names, bytes_in_use, live_tensors, pool_peak=None):
        self.label, self.names = label, list(names)
        self.bytes, self.live = list(bytes_in_use), list(live_tensors)
        # a planned timeline's pool peak (persistent + arena bytes); None for a measured one
        self.pool_peak = pool_peak
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
        return {"label": self.label, "names": self.names, "bytes": self.bytes, "live": self.live}


def _figure(figsize):
    """A matplotlib Figure made without pyplot: no backend is chosen and no global state is
    touched, so plotting from nnmem never changes the user's matplotlib settings (a notebook
    with `%matplotlib inline` displays the returned figure)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("plotting needs matplotlib: pip install 'nnmem[plot]'") from e
    return Figure(figsize=figsize)


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


def plot_timelines(
    timelines,
    path=None,
    lower_bound=None,
    title="memory during one iteration",
    lanes=None,
    log_scale=False,
):
    """A figure of bytes in use per position (top) and live tensors per position (bottom); with
    `lanes` ({label: TransferEngine.lanes()}), a panel of compute and copy lanes for each.
    Written to `path` as PNG when given; returned either way. log_scale: the bytes on a log
    axis, so that a baseline many times the others does not squash their curves."""
    lanes = lanes or {}
    fig = _figure((9, 6 + 2 * len(lanes)))
    axes = fig.subplots(2 + len(lanes), 1, sharex=False)
    top, bottom = axes[0], axes[1]
    for ax, (label, step_lanes) in zip(axes[2:], lanes.items()):
        draw_lanes(ax, step_lanes, label)
    for t in timelines:
        label = f"{t.label} (peak {t.peak / 2**20:.1f} MiB"
        if t.peak > max(t.bytes, default=0):  # a planned arena with gaps: say what is live
            label += f" with the arena's gaps, {max(t.bytes) / 2**20:.1f} MiB live"
        top.plot([b / 2**20 for b in t.bytes], label=label + ")")
        bottom.plot(t.live, label=t.label)
    if lower_bound is not None:
        top.axhline(
            lower_bound / 2**20,
            color="gray",
            linestyle="--",
            label=f"lower bound {lower_bound / 2**20:.1f} MiB",
        )
    if log_scale:
        top.set_yscale("log")
    top.set_ylabel("MiB in use" + (" (log scale)" if log_scale else ""))
    top.set_title(title)
    top.legend(fontsize="small")
    bottom.set_ylabel("live tensors")
    bottom.set_xlabel("position in the iteration (kernel calls, forward then backward)")
    bottom.legend(fontsize="small")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
