"""Memory timelines: bytes in use and live tensors at every step of an iteration, for each
technique, as data and as a plot (SuperNeurons' Figure 10 shape).

An eager timeline is measured: the device samples the pool after every kernel call. A graph
timeline is computed from its static plan: persistent bytes plus the storages live at that
position of the replay order.
"""


class Timeline:
    def __init__(self, label, names, bytes_in_use, live_tensors):
        self.label, self.names = label, list(names)
        self.bytes, self.live = list(bytes_in_use), list(live_tensors)

    @classmethod
    def from_samples(cls, label, samples):
        """From a device's timeline list of (name, allocated bytes, live blocks)."""
        names, bytes_in_use, live = zip(*samples) if samples else ((), (), ())
        return cls(label, names, bytes_in_use, live)

    @property
    def peak(self):
        return max(self.bytes, default=0)

    def peak_step(self):
        """(position, operation name) where the peak happens."""
        position = max(range(len(self.bytes)), key=self.bytes.__getitem__)
        return position, self.names[position]

    def as_dict(self):
        return {"label": self.label, "names": self.names, "bytes": self.bytes, "live": self.live}


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plotting needs matplotlib: pip install 'nnmem[plot]'") from e
    return plt


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
    timelines, path, lower_bound=None, title="memory during one iteration", lanes=None
):
    """Write a PNG: bytes in use per step (top) and live tensors per step (bottom); with
    `lanes` ({label: TransferEngine.lanes()}), a panel of compute and copy lanes for each."""
    plt = _pyplot()
    lanes = lanes or {}
    fig, axes = plt.subplots(2 + len(lanes), 1, figsize=(9, 6 + 2 * len(lanes)), sharex=False)
    top, bottom = axes[0], axes[1]
    for ax, (label, step_lanes) in zip(axes[2:], lanes.items()):
        draw_lanes(ax, step_lanes, label)
    for t in timelines:
        top.plot([b / 2**20 for b in t.bytes], label=f"{t.label} (peak {t.peak / 2**20:.1f} MiB)")
        bottom.plot(t.live, label=t.label)
    if lower_bound is not None:
        top.axhline(
            lower_bound / 2**20,
            color="gray",
            linestyle="--",
            label=f"lower bound {lower_bound / 2**20:.1f} MiB",
        )
    top.set_ylabel("MiB in use")
    top.set_title(title)
    top.legend(fontsize="small")
    bottom.set_ylabel("live tensors")
    bottom.set_xlabel("step of the iteration (kernel calls, forward then backward)")
    bottom.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
