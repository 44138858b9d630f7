"""Long work on the command line, reported on stderr while it runs.

A report is plain lines, the same on a terminal, in a log file or in a notebook: a bar redrawn
in place would reach a log as one long line of carriage returns, and a report shown on a
terminal only would leave a notebook silent. A search writes one line per probe, at once; a
single step writes its line only once it has taken SLOW_SECONDS, so that quick work prints
nothing. A line that has run SLOW_SECONDS also names each stage of the work as it starts
(for a plan: recording, then each technique), so that a minute-long step shows it is moving.

stdout keeps the results alone (the table, a search's answer): progress never mixes with them.
"""

import sys
import threading
import time

#: How long work runs before its report names its stages (and, for a single step, before the
#: report begins at all).
SLOW_SECONDS = 3.0


class Progress:
    """One piece of work, reported on one line of stderr: "nnmem plan: `what` ...", the
    stages, then the outcome and the seconds it took.

    Use it as a context manager around the work; call stage(name) as each stage starts, and
    set `outcome` (e.g. "fits 12.0 GiB") before leaving. `at_once`: begin the line as the
    work starts (a search's probe), rather than after SLOW_SECONDS (a single step). Leaving
    with an exception ends the line where it stands: the error says the rest."""

    def __init__(self, command, what, at_once=False):
        self.prefix = f"nnmem {command}: {what} ..."
        self.at_once = at_once
        self.outcome = "done"
        self._stages = []
        self._begun = self._slow = self._ended = False
        self._lock = threading.Lock()  # the timer's thread and the work's both write the line
        self._timer = threading.Timer(SLOW_SECONDS, self._on_slow)
        self._timer.daemon = True  # a stuck report never keeps the process alive

    def __enter__(self):
        self._start = time.perf_counter()
        if self.at_once:
            with self._lock:
                self._begin()
        self._timer.start()
        return self

    def stage(self, name):
        """The work has reached stage `name`: named on the line once the work is slow."""
        with self._lock:
            self._stages.append(name)
            if self._slow:
                self._write(f", {name}" if len(self._stages) > 1 else f" {name}")

    def __exit__(self, kind, error, traceback):
        self._timer.cancel()
        with self._lock:
            self._ended = True
            if not self._begun:
                return
            if kind is not None:
                self._write("\n")
                return
            seconds = time.perf_counter() - self._start
            separator = ";" if self._slow and self._stages else ""
            self._write(f"{separator} {self.outcome} ({seconds:.1f} s)\n")

    def _on_slow(self):
        """SLOW_SECONDS into the work (the timer's thread): begin the line if it has not begun,
        and from now on name the stages, those passed first."""
        with self._lock:
            if self._ended:  # the work ended while this call waited for the lock
                return
            self._begin()
            self._slow = True
            if self._stages:
                self._write(" " + ", ".join(self._stages))

    def _begin(self):
        if not self._begun:
            self._begun = True
            self._write(self.prefix)

    def _write(self, text):
        # sys.stderr looked up at each write: a test's capture, or a notebook's stream, may
        # have replaced it since this object was made
        sys.stderr.write(text)
        sys.stderr.flush()
