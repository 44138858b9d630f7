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


def plot_timelines(timelines, path, lower_bound=None, title="memory during one iteration"):
    """Write a PNG: bytes in use per step (top) and live tensors per step (bottom)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plotting needs matplotlib: pip install 'nnmem[plot]'") from e
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=False)
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
