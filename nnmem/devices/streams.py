"""Streams and events on the CPU, with the interface of numba.cuda's.

A *stream* is a queue of work that runs in the order it was queued; work on two streams may
run at the same time. An *event*, recorded on a stream, is set once everything queued on that
stream before it has finished. With these two, an offload engine overlaps copies with compute
(vDNN): queue a copy on the copy stream, record an event after it, and make the compute stream
(or the host) wait for that event only where the data is needed.

On a GPU they are CUDA's own (``numba.cuda.stream()``, ``numba.cuda.event()``). On the CPU:

* ``InlineStream``: runs the work at once on the calling thread. The CPU device's compute
  stream is one: its kernels already run when an operation calls them.
* ``WorkerStream``: one worker thread draining a FIFO queue: the CPU's copy engine.
* ``Event``: a ``threading.Event`` set by the stream that reaches it.

Method names are numba.cuda's: ``stream.synchronize()``, ``event.record(stream)``,
``event.wait(stream)`` (the *stream* waits, not the host), ``event.synchronize()`` (the host
waits), ``event.query()``.
"""

import queue
import threading

__all__ = ["InlineStream", "WorkerStream", "Event"]


class InlineStream:
    """Work runs when it is queued, on the caller's thread; nothing is ever pending."""

    def submit(self, fn, *args):
        fn(*args)

    def synchronize(self):
        pass


class WorkerStream:
    """A worker thread runs the queued work in order. An exception in the work is kept and
    raised by the next ``synchronize()`` (as CUDA reports an error at the next sync); the work
    queued after it is dropped, because it may depend on what failed."""

    def __init__(self, name="nnmem stream"):
        self._queue = queue.Queue()
        self._error = None
        self._name = name
        self._thread = None
        self._start_lock = threading.Lock()

    def submit(self, fn, *args):
        self._start()
        self._queue.put((fn, args))

    def synchronize(self):
        """Wait until every queued piece of work has run; raise the first failure among them."""
        if self._thread is not None:
            self._queue.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _start(self):
        with self._start_lock:  # two threads' first submits start one worker
            if self._thread is None:
                # A daemon: a stream nobody synchronises must not keep the process alive.
                self._thread = threading.Thread(target=self._drain, name=self._name, daemon=True)
                self._thread.start()

    def _drain(self):
        while True:
            fn, args = self._queue.get()
            try:
                if self._error is None:
                    fn(*args)
            except BaseException as e:  # kept for synchronize(); the worker must live on
                self._error = e
            finally:
                self._queue.task_done()


class Event:
    """Set when the work queued on a stream before ``record(stream)`` has finished."""

    def __init__(self):
        self._done = threading.Event()
        self._done.set()  # an event never recorded counts as reached, as in CUDA

    def record(self, stream=None):
        """Mark this point of `stream` (the inline stream by default)."""
        self._done.clear()
        (stream or _INLINE).submit(self._done.set)

    def wait(self, stream=None):
        """Make `stream` wait for this event before it runs anything queued after this call."""
        (stream or _INLINE).submit(self._done.wait)

    def synchronize(self):
        """Block the host until the event is reached."""
        self._done.wait()

    def query(self):
        """True if the event has been reached (does not wait)."""
        return self._done.is_set()


_INLINE = InlineStream()
