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
"""

import weakref

from cuda.bindings import driver

_CAPTURE_MODE = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL


def _check(result, what):
    """cuda.bindings returns (error, *values); raise on an error, return the values."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {error}")
    return values[0] if len(values) == 1 else values


class CapturedStep:
    """The executable graph of one run of `calls` on `stream`, and the key it was captured at."""

    def __init__(self, calls, stream, key):
        self.key, self.calls, self._stream = key, calls, int(stream.handle)
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


def _destroy(executable, graph):
    driver.cuGraphExecDestroy(executable)
    driver.cuGraphDestroy(graph)
