"""Ctrl-C that waits for the end of a phase that must not be cut in half.

A training step commits its result by updating every parameter in place. If a
KeyboardInterrupt arrived between two of those updates, half the parameters would belong to
the new step and half to the old one, a model no optimizer ever produced. Inside
``deferred_interrupts()`` a Ctrl-C is remembered instead of raised, and raised as soon as the
block ends: the step is then either wholly applied or not at all, and the user still gets
the interrupt, a few milliseconds later.

Python delivers signals to the main thread only, so elsewhere there is nothing to defer and
the context manager does nothing. A handler the user installed (not Python's default) is left
alone: it was chosen on purpose.
"""

import contextlib
import signal
import threading


@contextlib.contextmanager
def deferred_interrupts(message="interrupted; the step's updates were completed first"):
    """Run the block with SIGINT held back; raise KeyboardInterrupt(message) after it if one
    came."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt(message)
