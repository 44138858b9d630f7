"""The transfer engine: runs a compiled step's copy-outs and prefetches on the copy stream,
beside the kernels on the compute stream, and makes each side wait for the other only where
the data demands it.

Two modes (vDNN, and vDNNExt's improvement of it):
- synchronous (vDNN): at the end of every layer the host waits for both streams, so a layer's
  copies overlap only that layer's compute, and a slow copy stalls every layer after it;
- asynchronous (vDNNExt, the default): nothing waits at layer ends. The compute stream waits
  only (1) before a kernel reads a prefetched tensor, for that prefetch, and (2) before the
  first kernel that writes bytes of an offloaded tensor whose copy-out may still be reading
  them (the static plan reuses those bytes once the tensor is dead on the device: this is
  where the block is "released", when its copy-out event has fired). A copy waits for the
  compute stream to have queued what it reads (or, for a prefetch, to be done with the bytes
  it overwrites) through an event, never through the host.

At the end of the compute phase the host waits for the copy stream and raises the first failed
copy there, before the commit phase: a failed transfer changes no parameter.

Captured as one CUDA graph (capture_form, used by devices/cuda.py), the asynchronous mode's
calls take a form with no host query and no host synchronisation inside: see CaptureForm.

Measured each step with events (set when their stream reaches them): transfer time (the sum
of the copies' durations), stall time (the compute stream waiting for copies) and overlap =
1 - stall / transfer: the share of transfer time hidden behind compute.
"""

from nnmem.graph.offload import MARKER, layer_of
from nnmem.memory.errors import TransferError


class TransferEngine:
    def __init__(self, device, synchronous=False):
        self.device = device
        self.synchronous = synchronous
        self.transfers = []  # (node, start, done): the events around each transfer
        self.waits = []  # (label, before, after): events around the waits made this step
        self.trace = False  # record every call's start and end (lanes); set before calls()
        self._traced = []  # (lane, name, start event, end event) of each traced call
        self._stalls = []  # the last step's waits, as self.waits holds them
        self._origin = device.create_event()  # the start of the step, for lanes()
        # the last calls() built, their roles ("call", "wait", "transfer", "sync") and split
        self._built = [], [], 0

    # -- building the call list -----------------------------------------------------------
    def calls(self, nodes, order, commit_start, arrays_of):
        """(calls, split): the step's calls, (name, fn, arrays) in replay order, with the
        transfers routed to the copy stream and the waits inserted, and the index in them where
        the commit phase starts. `arrays_of(node)` builds a node's arrays."""
        dev = self.device
        waits_before = {}  # position -> [(label, event)]
        self.transfers, self.waits, self._traced, self._stalls = [], [], [], []
        events = {}
        commit_start = min(commit_start, len(order))
        for position, i in enumerate(order):
            node = nodes[i]
            if node.stream != "copy":
                continue
            done = dev.create_event()
            events[i] = done
            if node.fn.direction == "in":  # readers of the prefetched block wait for it
                shadow = node.writes[0].block
                reader = self._first(nodes, order, position, lambda n: _reads(n, shadow))
                label = f"prefetch of {node.fn.desc}"
            else:  # the first kernel that overwrites its bytes waits for the copy-out
                source = node.reads[0].block
                reader = self._first(
                    nodes, order, position, lambda n: n.stream == "compute" and _overlaps(n, source)
                )
                label = f"copy-out of {node.fn.desc}"
            if reader is not None:
                waits_before.setdefault(reader, []).append((label, done))
        out, roles, split = [], [], len(order)
        for position, i in enumerate(order):
            node = nodes[i]
            if position == commit_start:
                split = len(out)
            for label, event in waits_before.get(position, ()):
                out.append((f"wait:{label}", self._wait_call(label, event), []))
                roles.append(("wait", label, event))
            if node.stream == MARKER:  # a point of the plan: nothing runs
                pass
            elif node.stream == "copy":
                out.append((node.name, self._transfer_call(node, events[i]), arrays_of(node)))
                roles.append(("transfer", node, events[i]))
            else:
                call = self._traced_call(node) if self.trace else node.fn
                out.append((node.name, call, arrays_of(node)))
                roles.append(("call",))
            if (
                self.synchronous
                and position < commit_start
                and self._layer_ends(nodes, order, position)
            ):
                out.append((f"sync:{layer_of(node)}", self._sync_call(layer_of(node)), []))
                roles.append(("sync",))
        self._built = out, roles, split
        return out, split

    def capture_form(self, record_node):
        """The last calls() built, in the form a CUDA stream capture records (CaptureForm);
        `record_node(event, stream)` records a timing event as a node of the graph. Only the
        asynchronous mode without tracing has one: sync mode synchronises the host at every
        layer's end, and tracing is a diagnostic, run call by call."""
        if self.synchronous or self.trace:
            raise ValueError(
                "only an asynchronous engine without tracing can be captured: synchronous "
                "offloading and trace_transfers() replay call by call"
            )
        return CaptureForm(self.device, *self._built, record_node)

    @staticmethod
    def _first(nodes, order, position, test):
        """The first position after `position` whose node passes `test`, or None."""
        for later in range(position + 1, len(order)):
            if test(nodes[order[later]]):
                return later
        return None

    @staticmethod
    def _layer_ends(nodes, order, position):
        """Is this the last kernel of its layer? The synchronisation goes right after it, so a
        copy queued at the boundary (the next layer's input going out, a prefetch for the
        next layer) overlaps the next layer's compute, as in vDNN."""
        node = nodes[order[position]]
        if node.stream != "compute":
            return False
        for later in range(position + 1, len(order)):
            following = nodes[order[later]]
            if following.stream == "compute":
                return layer_of(following) != layer_of(node)
        return True

    # -- what runs ------------------------------------------------------------------------
    def _transfer_call(self, node, done):
        dev = self.device
        ready, start = dev.create_event(), dev.create_event()
        self.transfers.append((node, start, done))
        self._traced.append(("copy", node.name, start, done))
        label = _transfer_label(node)

        def transfer(dst, src):
            # the copy runs after what the compute stream queued before it (the producer, or
            # the last reader of the bytes a prefetch overwrites)
            ready.record(dev.compute_stream)
            ready.wait(dev.copy_stream)
            start.record(dev.copy_stream)
            dev.queue_copy(dst, src, dev.copy_stream, label)
            done.record(dev.copy_stream)

        return transfer

    def _traced_call(self, node):
        dev = self.device
        start, end = dev.create_event(), dev.create_event()
        self._traced.append(("compute", node.name, start, end))

        def traced(*arrays):
            start.record(dev.compute_stream)
            node.fn(*arrays)
            end.record(dev.compute_stream)

        return traced

    def begin(self):
        """Mark the start of a step (the origin of lanes())."""
        self._origin.record(self.device.compute_stream)

    def lanes(self):
        """The last step's calls as (lane, name, start, end), seconds from its start: the
        compute lane (only when ``trace`` was set), the copy lane, and the stalls (lane
        "stall": the compute stream waiting for a copy, or for a layer's end in sync mode).
        Read after the step."""
        origin = self._origin
        traced = self._traced + [("stall", label, b, a) for label, b, a in self._stalls]
        return [
            (lane, name, origin.elapsed_time(start) / 1e3, origin.elapsed_time(end) / 1e3)
            for lane, name, start, end in traced
        ]

    def _wait_call(self, label, event):
        dev = self.device
        before, after = dev.create_event(), dev.create_event()
        if hasattr(event, "label"):
            event.label = label  # named in the timeout's message

        def wait():
            if not _reached(event):  # the copy is not done: the compute stream stalls
                before.record(dev.compute_stream)
                event.wait(dev.compute_stream)
                after.record(dev.compute_stream)
                self.waits.append((label, before, after))
            # a failed copy left garbage where the next kernel reads (a pooling's argmax is
            # an index: garbage writes out of bounds): raise before it runs
            dev.raise_copy_failure(label)

        return wait

    def _sync_call(self, layer):
        dev = self.device
        before, after = dev.create_event(), dev.create_event()

        def sync():
            before.record(dev.compute_stream)
            self.finish()
            after.record(dev.compute_stream)
            self.waits.append((f"end of layer {layer}", before, after))

        return sync

    def finish(self):
        """Wait for every queued copy; raise a failed one as a TransferError."""
        try:
            self.device.copy_stream.synchronize()
        except Exception as e:
            raise TransferError(f"a copy between device and host memory failed: {e}") from e

    # -- figures --------------------------------------------------------------------------
    def measure(self):
        """The last step's figures, after finish(): seconds of transfer and stall, overlap,
        bytes each way (shown in memory_stats() as offload.*). The next step measures its own
        waits. finish() waited for the copy stream only: the waits' events are on the compute
        stream, which may not have reached them yet (a GPU's events cannot be read before)."""
        for _, _, after in self.waits:
            after.synchronize()
        figures = offload_figures(self.synchronous, self.transfers, self.waits)
        self._stalls, self.waits = self.waits, []  # the last step's, for lanes()
        return figures


class CaptureForm:
    """An asynchronous engine's calls as CUDA stream captures can record them (one graph per
    run of kernels between host calls, and the commit phase apart: devices/cuda_graph.py
    CapturedReplay; ``split``: where the commit starts in ``calls``), with the same kernels on
    the same arrays in the same dependency order (so the same numbers):

    - no host query and no host synchronisation inside (both are illegal while capturing):
      every wait is made, where the uncaptured engine first asks whether the copy is done,
      and nothing synchronises until the graph's launch has been queued;
    - the copy stream *forks* from the compute stream (the first copy waits for an event
      recorded on the compute stream: the capture then records the copy stream too) and
      *joins* back where the compute phase ends and before each host call (the compute stream
      waits for an event recorded on the copy stream, as ``finish()`` waits uncaptured): a
      capture ending with a fork not joined fails (CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    - a plain event record inside a capture is no node of the graph (it only carries the
      dependency), so the timing events around each copy and each wait are recorded by
      `record_node` (an event record node: each launch records them), and measure() reads them
      after a launch has ended. A wait's stall is measured every time: ~0 when the copy was
      already done.

    A copy that fails on the GPU cannot raise before the kernel that reads it, as the engine's
    waits do uncaptured: the synchronisation at the end of the compute phase raises it, before
    the commit."""

    def __init__(self, device, calls, roles, split, record_node):
        self.device, self._record_node = device, record_node
        self.transfers, self.waits = [], []  # as TransferEngine's, the same for every launch
        self.calls = []  # (name, fn, arrays), for cuda_graph.CapturedStep
        done_of = {}  # the uncaptured engine's event after a copy -> this form's
        forked = False  # a copy was queued since the copy stream last joined back
        self.split = None  # where the commit phase starts in self.calls
        for position, (entry, role) in enumerate(zip(calls, roles)):
            runs_on_host = getattr(entry[1], "runs_on_host", False)
            if (position == split or runs_on_host) and forked:
                self.calls.append(self._join())  # a graph ends here: its copies join it
                forked = False
            if position == split:
                self.split = len(self.calls)
            if role[0] == "wait":
                _, label, event = role
                self.calls.append((entry[0], self._wait(label, done_of[event]), []))
            elif role[0] == "transfer":
                _, node, event = role
                done_of[event] = device.create_event()
                self.calls.append((entry[0], self._transfer(node, done_of[event]), entry[2]))
                forked = True
            else:
                self.calls.append(entry)
        if forked:
            self.calls.append(self._join())
        if self.split is None:  # no commit phase
            self.split = len(self.calls)

    def _transfer(self, node, done):
        dev, record_node = self.device, self._record_node
        ready, start, end = dev.create_event(), dev.create_event(), dev.create_event()
        self.transfers.append((node, start, end))

        def transfer(dst, src):
            ready.record(dev.compute_stream)  # the fork (first copy), or a dependency
            ready.wait(dev.copy_stream)
            record_node(start, dev.copy_stream)
            dev.queue_copy(dst, src, dev.copy_stream, _transfer_label(node))
            record_node(end, dev.copy_stream)
            done.record(dev.copy_stream)

        return transfer

    def _wait(self, label, done):
        dev, record_node = self.device, self._record_node
        before, after = dev.create_event(), dev.create_event()
        self.waits.append((label, before, after))

        def wait():
            record_node(before, dev.compute_stream)
            done.wait(dev.compute_stream)
            record_node(after, dev.compute_stream)

        return wait

    def _join(self):
        dev = self.device
        joined = dev.create_event()

        def join():
            joined.record(dev.copy_stream)
            joined.wait(dev.compute_stream)

        return ("join:copy stream", join, [])

    def measure(self):
        """The figures of the last launch, after it has ended (as TransferEngine.measure)."""
        return offload_figures(False, self.transfers, self.waits)


def offload_figures(synchronous, transfers, waits):
    """The offload.* figures of one step: `transfers` (node, start, end) and `waits` (label,
    before, after) are events its streams have reached."""
    # max(0, ...): Numba's CUDA simulator has events without clocks
    transfer = sum(max(0.0, s.elapsed_time(e)) for _, s, e in transfers) / 1e3
    stall = sum(max(0.0, b.elapsed_time(a)) for _, b, a in waits) / 1e3
    out = sum(n.fn.nbytes for n, _, _ in transfers if n.fn.direction == "out")
    back = sum(n.fn.nbytes for n, _, _ in transfers if n.fn.direction == "in")
    return {
        "offload.mode": "sync" if synchronous else "async",
        "offload.tensors": len(transfers) // 2,
        "offload.bytes_to_host": out,
        "offload.bytes_to_device": back,
        "offload.transfer_seconds": transfer,
        "offload.stall_seconds": stall,
        # a stall may outlast the copies' own time (a copy also waits behind the ones queued
        # before it on the copy stream): then nothing was hidden, 0
        "offload.overlap": max(0.0, 1.0 - stall / transfer) if transfer > 0 else 1.0,
    }


def _transfer_label(node):
    return f"{'copy-out' if node.fn.direction == 'out' else 'prefetch'} of {node.fn.desc}"


def _reached(event):
    """Has the event been reached? (Numba's CUDA simulator has no query: not known, so no.)"""
    query = getattr(event, "query", None)
    return query is not None and query()


def _reads(node, block):
    return any(spec.block is block for spec in node.reads)


def _overlaps(node, block):
    """Does `node` write bytes of `block`'s place in the pool?"""
    start, end = block.offset, block.offset + block.nbytes
    for spec in node.writes:
        other = spec.block
        if other.offset is not None and other.device is block.device:
            if other.offset < end and start < other.offset + other.nbytes:
                return True
    return False
