"""The graph arena: one pool block shared by every compiled step of a device.

A compiled step lays out its intermediate blocks in an arena. Steps never run at the same time,
and a step's intermediate blocks are dead once it ends (results, inputs and parameters live
outside the arena), so all the steps of a device (training, inference, the last smaller batch)
can use the same bytes: the arena is as large as the largest plan, not their sum.
"""

import weakref

from nnmem.interrupts import deferred_interrupts


class SharedArena:
    """`place`: the name of the method a user is placed with, ``user.<place>(offset)``."""

    def __init__(self, pool, place="place"):
        self.pool = pool
        self._place = place
        self.offset = None
        self.size = 0
        self._users = weakref.WeakSet()  # compiled steps laid out in the arena
        self._needs = weakref.WeakKeyDictionary()  # each user's plan, in bytes

    def join(self, step, nbytes):
        """Make room for a plan of `nbytes` and place `step` (and, if the arena moved, every
        other user) at the arena's offset via ``step.place(offset)``."""
        if step not in self._needs:  # once per step, however often it joins
            # A step collected by the garbage collector leaves: the arena is freed when none is
            # left (safe at any moment: nothing uses it), shrunk by the next fit() otherwise.
            weakref.finalize(step, self._release_if_unused)
        self._needs[step] = nbytes
        if nbytes <= self.size:
            self._users.add(step)
            getattr(step, self._place)(self.offset)
            return
        self._resize(nbytes)  # raises OutOfMemory with every current user placed as before
        self._users.add(step)
        for user in list(self._users):
            getattr(user, self._place)(self.offset)

    def __contains__(self, step):
        return step in self._users

    def leave(self, step):
        """Take `step` out (to be planned again, or for good); the arena goes back to the pool
        when no step uses it any more. It keeps its size otherwise: fit() shrinks it."""
        self._users.discard(step)
        self._needs.pop(step, None)
        self._release_if_unused()

    def fit(self):
        """Shrink to the largest plan of the steps still using it (the others left for good or
        were collected), placing them again. Only when no step runs (it may move the arena):
        Device.fit_arenas."""
        largest = max(self._needs.values(), default=0)
        if self.offset is not None and largest < self.size:
            self._resize(largest)
            for user in list(self._users):
                getattr(user, self._place)(self.offset)

    OWNER = "graph arena (shared by compiled steps)"

    def _resize(self, nbytes):
        """Move to a block of `nbytes`. If the pool cannot serve it (or anything fails), the
        old size is allocated again (its bytes were just freed, so it fits), possibly at
        another offset, and the users are placed there before the error goes on: none is left
        on freed bytes. A Ctrl-C waits for the move to end, for the same reason."""
        with deferred_interrupts():
            if self.offset is not None:
                self.pool.free(self.offset)
            try:
                self.offset = self.pool.alloc(nbytes, owner=self.OWNER)
            except BaseException:  # out of memory, or any other failure: back to the old size
                if self.offset is not None:
                    self.offset = self.pool.alloc(self.size, owner=self.OWNER)
                    for user in list(self._users):
                        getattr(user, self._place)(self.offset)
                raise
            self.size = nbytes

    def _release_if_unused(self):
        if self.offset is not None and not any(True for _ in self._users):
            self.pool.free(self.offset)
            self.offset, self.size = None, 0
