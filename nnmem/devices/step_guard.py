"""One step at a time on a device, and a commit phase that a Ctrl-C cannot cut in half.

A device's pool, graph arena, recorder and switches are shared by every thread that uses it.
A step (``Device.step()``) and every ``exec`` hold the guard's lock, so two threads that share
the device take turns instead of interleaving in them; the lock is reentrant: a step's own
execs take it again, and a model may be called inside another model's step.

The guard also counts what a failed step's undo needs to know (Model.__call__):

* ``commits``: commit phases begun. The commit phase is the step's parameter updates; once it
  has begun the step counts as done (a later failure no longer rolls its buffers back), and a
  Ctrl-C waits for the phase's end (nnmem.interrupts).
* ``iteration``: steps that returned (SINGA's profiler leaves the first ones out).

With recycling off (Device.recycle), a block freed inside a step waits here (``defer``) until
the outermost step ends, failed or not.
"""

import contextlib
import threading

from nnmem.interrupts import deferred_interrupts


class StepGuard:
    def __init__(self):
        self.lock = threading.RLock()
        self.running = 0  # steps in progress: more than one when a model runs inside another
        self.commits = 0
        self.iteration = 0
        self._deferred = []  # blocks whose frees wait for the end of the step

    @contextlib.contextmanager
    def step(self):
        """Hold the lock for one step; however it ends, the outermost step releases the
        deferred blocks (a Ctrl-C then waits: it would leak the rest); a step that returns
        counts as an iteration."""
        with self.lock:
            self.running += 1
            try:
                yield
            finally:
                self.running -= 1
                if not self.running:
                    with deferred_interrupts():
                        self._release_deferred()
            self.iteration += 1

    @contextlib.contextmanager
    def commit_phase(self, counts):
        """The step's commit: a Ctrl-C waits for its end; it adds to ``commits`` if `counts`
        (False while nothing runs: a step being recorded, or a dry run)."""
        with deferred_interrupts():  # first: a Ctrl-C now must not find half a commit
            if counts:
                self.commits += 1
            yield

    def defer(self, block):
        """Free `block` when the outermost step ends (if nothing refers to it again)."""
        self._deferred.append(block)

    def _release_deferred(self):
        deferred, self._deferred = self._deferred, []
        for block in deferred:
            if block.ref_count == 0:
                block.release()
