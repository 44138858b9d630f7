"""CUDA graphs: a whole replayed step launched as one graph instead of ~400 kernel launches.

Why: launching a Numba kernel from Python costs ~150 us of host time (argument typing and
marshalling in numba.cuda), far more than most of a small network's kernels take on the GPU.
Measured on an H100, ResNet-20 at batch 32: 63 ms per replayed step, all of it the host
launching; the same kernels launched as one CUDA graph: 20 ms, the GPU's own time.

How: a replay launches the same kernels, on the same arrays, in the same order every step: a
static plan. CUDA records such a sequence once (stream capture: while capturing, a launch on
the stream is recorded, not run), makes an executable graph of it, and replays the whole graph
with one call (``cuGraphLaunch``), as PyTorch's CUDA graphs do.

What a graph freezes: every launch's arguments -- the arrays' addresses and the Python scalars
(learning rate, momentum, dropout's seed). So a captured step is reused only while its *key*
is unchanged: the caller passes those host values (see Model._host_values), and the executor
drops the graph when the arena moves (new addresses). Everything else a step reads lives in
device memory (the dropout counter, the optimizer's step count), so replays of one graph
stay exactly the replays of the step.

A step that offloads is captured too (graph/engine.py:CaptureForm): its copy stream joins the
capture by waiting for an event of the compute stream (a fork) and joins back before the capture
ends; its copies between device memory and pinned host memory become memcpy nodes, and its
timing events become event record nodes (record_node), so each launch is measured as an
uncaptured step is.
"""

import weakref

from cuda.bindings import driver

_CAPTURE_MODE = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
_EXTERNAL = driver.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL


def _check(result, what):
    """cuda.bindings returns (error, *values); raise on an error, return the values."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {error}")
    return values[0] if len(values) == 1 else values


def record_node(event, stream):
    """Record `event` on the capturing `stream` as a node of the graph, which every launch
    records (a plain record inside a capture makes no node: it only carries a dependency), so
    that ``elapsed_time`` reads each launch's moments once it has ended."""
    _check(
        driver.cuEventRecordWithFlags(int(event.handle), int(stream.handle), _EXTERNAL),
        "cuEventRecordWithFlags",
    )


class CapturedStep:
    """The executable graph of one run of `calls` on `stream`, and the key it was captured at.
    `source`: the step's own call list, when `calls` is a capturable form of it (the graph
    stands for `source`); `calls` stay referenced, with the events their graph records.
    `measured`: what reads each launch's figures once it has ended, or None (an offloading
    step's engine.CaptureForm)."""

    def __init__(self, calls, stream, key, source=None, measured=None):
        self.key, self.calls, self._stream = key, calls, int(stream.handle)
        self.source = calls if source is None else source
        self.measured = measured
        _check(driver.cuStreamBeginCapture(self._stream, _CAPTURE_MODE), "cuStreamBeginCapture")
        try:
            for _, fn, arrays in calls:
                fn(*arrays)
        finally:  # always end the capture: a stream left capturing refuses every later launch
            graph = _check(driver.cuStreamEndCapture(self._stream), "cuStreamEndCapture")
        self._graph = graph
        self._exec = _check(driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        weakref.finalize(self, _destroy, self._exec, graph)

    def launch(self):
        """Queue the whole step on the stream (returns at once, like a kernel launch)."""
        _check(driver.cuGraphLaunch(self._exec, self._stream), "cuGraphLaunch")


class CapturedReplay:
    """A replayed step as CUDA graphs: its compute phase (calls[:split]) and its commit phase
    (calls[split:]), each cut at its host calls (``fn.runs_on_host``: loss scaling's overflow
    check, DistOpt's collectives) into runs of kernels, each run captured as one graph. A
    replay launches the graphs and runs the host calls between them, in the recorded order:
    what ran call by call, in fewer launches. ``compute()`` ends with `after_compute()` (an
    offloading step waits for its copies there, before the commit, as uncaptured);
    ``commit()`` launches the rest. `source`, `key`, `measured`: as CapturedStep's."""

    def __init__(self, calls, split, stream, key, source, measured=None, after_compute=None):
        self.key, self.source, self.measured = key, source, measured
        self._after_compute = after_compute
        self._compute = _pieces(calls[:split], stream, key)
        self._commit = _pieces(calls[split:], stream, key)

    def compute(self):
        """The compute phase; a host call may raise (SkippedStep ends the step here)."""
        _run(self._compute)
        if self._after_compute is not None:
            self._after_compute(self)

    def commit(self):
        _run(self._commit)

    def graphs(self):
        """How many graphs a replay launches."""
        return sum(isinstance(p, CapturedStep) for p in self._compute + self._commit)


def _pieces(calls, stream, key):
    """`calls` as [CapturedStep of a run of kernels, or a host call (fn, arrays)], in order."""
    pieces, run = [], []
    for call in calls:
        if getattr(call[1], "runs_on_host", False):
            if run:
                pieces.append(CapturedStep(run, stream, key))
            pieces.append(call[1:])
            run = []
        else:
            run.append(call)
    if run:
        pieces.append(CapturedStep(run, stream, key))
    return pieces


def _run(pieces):
    for piece in pieces:
        if isinstance(piece, tuple):
            fn, arrays = piece
            fn(*arrays)
        else:
            piece.launch()


def _destroy(executable, graph):
    driver.cuGraphExecDestroy(executable)
    driver.cuGraphDestroy(graph)
