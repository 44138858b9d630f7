"""The cost model of the optimal planner: how long each recorded operation and each copy takes.

Two sources, and the model says which one it used (``CostModel.source``):
- "measured": on a device that runs kernels on host arrays (the CPU device), each recorded
  node's kernel is timed once on scratch arrays of its shapes (``Device.time_kernel``: the
  fastest of a few runs after one that may compile). Nodes with the same operation and the
  same shapes are timed once. The scratch arrays live outside the pool: timing allocates no
  pool byte, and the values (ones, and zeros for indices) are never read back;
- "flop model": elsewhere (a planning device, which runs nothing, or a GPU), a stated model:
  seconds = flops / FLOPS + bytes / BYTES_PER_SECOND, where bytes are what the node reads and
  writes and flops are counted for the convolution and matrix-product passes only
  (2 * multiply-adds; devices/flops.py). Its rates are those of the 2-core machine nnmem was
  measured on (a CPU's order of magnitude, not a GPU's): only the ratios between nodes steer
  the plan.

A copy between device and host takes bytes / link speed: the CPU device's ``link_gbps`` when
it throttles its copy link, else LINK_BYTES_PER_SECOND (a PCIe 3 x16 link's 12 GB/s).
"""

import math
from dataclasses import dataclass

import numpy as np

from nnmem.devices.flops import kernel_flops

#: The flop model's rates (float32 on 2 cores with AVX-512: GEMM ~ 100 GFLOP/s, memory ~ 10 GB/s).
FLOPS = 100e9
BYTES_PER_SECOND = 10e9
#: Copy speed between device and host when the device does not state one (PCIe 3 x16).
LINK_BYTES_PER_SECOND = 12e9


@dataclass(frozen=True)
class CostModel:
    """seconds[i]: the time of recorded node i; link: bytes per second between device and
    host; source: "measured" or "flop model" (see the module's docstring)."""

    seconds: tuple
    link: float
    source: str

    def copy_seconds(self, nbytes):
        return nbytes / self.link

    @property
    def step_seconds(self):
        """The step with no technique: every node once, nothing waiting."""
        return math.fsum(self.seconds)


def cost_model(nodes, device):
    """The CostModel of the recorded `nodes` on `device` (measured where it can run them)."""
    gbps = getattr(device, "link_gbps", None)
    link = LINK_BYTES_PER_SECOND if gbps is None else gbps * 1e9
    if device.runs_kernels and device.kind == "cpu":
        return CostModel(tuple(_measured(nodes, device)), link, "measured")
    return CostModel(tuple(modelled_seconds(n) for n in nodes), link, "flop model")


def modelled_seconds(node):
    """The flop model's time of one node."""
    if node.stream != "compute" or node.fn is None:
        return 0.0
    nbytes = sum(_nbytes(s) for s in node.writes + node.reads)
    return flops(node) / FLOPS + nbytes / BYTES_PER_SECOND


def flops(node):
    """Floating-point operations of a node: a convolution or matrix-product pass's (0 for the
    rest); devices/flops.py counts them."""
    return kernel_flops(node.name, [s.shape for s in node.writes + node.reads])


def _nbytes(spec):
    return math.prod(spec.shape) * np.dtype(spec.dtype).itemsize


def _measured(nodes, device):
    """Seconds of each node's kernel on scratch arrays (the flop model where it cannot run)."""
    timed, seconds = {}, []
    for node in nodes:
        if node.stream != "compute" or node.fn is None:
            seconds.append(0.0)
            continue
        specs = node.writes + node.reads
        key = (node.name.split(":")[-1], tuple((tuple(s.shape), str(s.dtype)) for s in specs))
        if key not in timed:
            timed[key] = _time_node(node, specs, device)
        seconds.append(timed[key])
    return seconds


def _time_node(node, specs, device):
    arrays = [_scratch(s) for s in specs]
    try:
        return device.time_kernel(node.fn, arrays)
    except Exception:  # a kernel that refuses made-up values (an index out of range): model it
        return modelled_seconds(node)


def _scratch(spec):
    dtype = np.dtype(spec.dtype)
    fill = 0 if dtype.kind in "iub" else 1
    return np.full(spec.shape, fill, dtype)


def plan_seconds(plan, costs, recorded):
    """The cost model's time of a placed plan (heuristic or optimal, one definition for both),
    by playing its replay order on two clocks, as the transfer engine runs it (engine.py):

    - the compute clock runs every compute node for its time (recorded nodes at their own,
      recomputations at their producer's);
    - the copy stream runs the transfers one after another, each starting once it is issued
      (when compute reaches it) and the stream is free, for bytes / link seconds;
    - compute waits (stalls) before a node that reads a prefetched block until that prefetch
      is done, and at a copy-out's release point (the marker after which its bytes are reused)
      until that copy-out is done; and at the end of the compute phase, for every copy.

    The plan's time is the compute clock at the end: every node, plus every stall."""
    own, rebuilt = {}, {}  # a recorded node by what it writes; a recomputation by its recipe
    for node in recorded:
        own[_identity(node)] = costs.seconds[node.index]
        shapes = tuple(tuple(s.shape) for s in node.writes)
        rebuilt.setdefault((f"{node.name} (recompute)", shapes), costs.seconds[node.index])
    compute = stream = 0.0
    fetched, copied = {}, {}  # id(prefetched block), id(copied-out block) -> when it is done
    committing = False
    for position in plan.order:
        node = plan.nodes[position]
        if not committing and node.phase == "update":  # the engine waits for every copy first
            compute, committing = max(compute, stream), True
        if node.stream == "copy":
            stream = max(stream, compute) + costs.copy_seconds(node.fn.nbytes)
            if node.fn.direction == "in":
                fetched[id(node.writes[0].block)] = stream
            else:
                copied[id(node.reads[0].block)] = stream
            continue
        # a release point waits for its copy-out; a reader, for its prefetch
        done = copied if node.stream != "compute" else fetched
        compute = max([compute] + [done.pop(id(s.block), 0.0) for s in node.reads])
        if node.stream != "compute" or node.fn is None:
            continue
        known = own.get(_identity(node))
        if known is None:
            known = rebuilt.get((node.name, tuple(tuple(s.shape) for s in node.writes)))
        compute += modelled_seconds(node) if known is None else known
    return max(compute, stream)


def _identity(node):
    """A recorded node, as the rewrites copy it: its function and the blocks it writes."""
    return id(node.fn), tuple(id(s.block) for s in node.writes)
