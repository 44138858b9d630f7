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
* ``Event``: set by the stream that reaches it.

Method names and semantics are CUDA's: ``stream.synchronize()``; ``event.record(stream)``;
``event.wait(stream)`` (the *stream* waits, for the record made before this call, as
cudaStreamWaitEvent); ``event.synchronize()`` (the host waits for the latest record);
``event.query()``; ``start.elapsed_time(end)`` (milliseconds between the moments two events
were reached). An event never recorded counts as reached.

No wait is unbounded: one that lasts ``WAIT_TIMEOUT_S`` raises a TimeoutError naming what it
waited for (a worker that hangs must not hang training silently).
"""

import queue
import threading
import time

__all__ = ["InlineStream", "WorkerStream", "Event", "WAIT_TIMEOUT_S"]

WAIT_TIMEOUT_S = 600.0  # seconds; far above any copy, short of a silent hang


def _timed_out(what):
    return TimeoutError(
        f"waited {WAIT_TIMEOUT_S:.0f} s for {what}: the work it waits for never finished "
        "(a hung copy?); nnmem.devices.streams.WAIT_TIMEOUT_S sets the limit"
    )


class InlineStream:
    """Work runs when it is queued, on the caller's thread; nothing is ever pending."""

    def submit(self, fn, *args, always=False):
        fn(*args)

    def synchronize(self):
        pass


class WorkerStream:
    """A worker thread runs the queued work in order. An exception in the work is kept and
    raised by the next ``synchronize()`` (as CUDA reports an error at the next sync); the work
    queued after it is dropped, because it may depend on what failed -- except work queued with
    ``always=True`` (an event's marker: whoever waits for the event must not wait for ever)."""

    def __init__(self, name="nnmem stream"):
        self._queue = queue.Queue()
        self._error = None
        self._name = name
        self._thread = None
        self._start_lock = threading.Lock()

    def submit(self, fn, *args, always=False):
        self._start()
        self._queue.put((fn, args, always))

    def synchronize(self):
        """Wait until every queued piece of work has run; raise the first failure among them."""
        if self._thread is not None:
            with self._queue.all_tasks_done:  # Queue.join, with a bound
                if not self._queue.all_tasks_done.wait_for(
                    lambda: not self._queue.unfinished_tasks, WAIT_TIMEOUT_S
                ):
                    raise _timed_out(f"the work queued on {self._name}")
        error, self._error = self._error, None
        if error is not None:
            raise error

    def raise_failure(self):
        """Raise the first failure among the work run so far, without waiting for the rest."""
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
            fn, args, always = self._queue.get()
            try:
                if self._error is None or always:
                    fn(*args)
            except BaseException as e:  # kept for synchronize(); the worker must live on
                if self._error is None:
                    self._error = e
            finally:
                self._queue.task_done()


class Event:
    """Set when the work queued on a stream before ``record(stream)`` has finished.

    Records are numbered: ``wait`` and ``synchronize`` wait for the record that was the latest
    when they were called, so recording the event again (on the same stream or another) never
    makes an earlier waiter wait longer, or a later one return early."""

    def __init__(self, label="an event"):
        self._changed = threading.Condition()
        self._recorded = 0  # records made (numbered from 1)
        self._pending = set()  # records whose point of their stream is not reached yet
        self._reached_at = None  # time.perf_counter() when the latest reached record was reached
        self.label = label  # what it marks, for the timeout's message

    def record(self, stream=None):
        """Mark this point of `stream` (the inline stream, i.e. the host, by default)."""
        with self._changed:
            self._recorded += 1
            number = self._recorded
            self._pending.add(number)
        (stream or _INLINE).submit(self._reach, number, always=True)

    def wait(self, stream=None):
        """Make `stream` wait, before anything queued after this call, for the latest record."""
        with self._changed:
            number = self._recorded
        (stream or _INLINE).submit(self._wait_for, number, always=True)

    def synchronize(self):
        """Block the host until the latest record is reached."""
        with self._changed:
            number = self._recorded
        self._wait_for(number)

    def query(self):
        """True if the latest record has been reached (does not wait)."""
        with self._changed:
            return self._done(self._recorded)

    def elapsed_time(self, end):
        """Milliseconds from this event's latest record being reached to `end`'s (numba.cuda's
        name and unit); both must have been reached."""
        if self._reached_at is None or end._reached_at is None:
            raise RuntimeError("elapsed_time: an event was never reached; synchronize first")
        return (end._reached_at - self._reached_at) * 1e3

    def _done(self, number):
        return number not in self._pending

    def _reach(self, number):
        with self._changed:
            self._pending.discard(number)
            self._reached_at = time.perf_counter()
            self._changed.notify_all()

    def _wait_for(self, number):
        with self._changed:
            if not self._changed.wait_for(lambda: self._done(number), WAIT_TIMEOUT_S):
                raise _timed_out(self.label)


_INLINE = InlineStream()
