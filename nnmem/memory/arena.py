"""The graph arena: one pool block shared by every compiled step of a device.

A compiled step plans its intermediate blocks into an arena. Steps never run at the same time,
and a step's intermediate blocks are dead once it ends (results, inputs and parameters live
outside the arena), so all the steps of a device (training, inference, the last smaller batch)
can use the same bytes: the arena is as large as the largest plan, not their sum.
"""
import weakref


class SharedArena:
    def __init__(self, pool):
        self.pool = pool
        self.offset = None
        self.size = 0
        self._users = weakref.WeakSet()  # compiled steps planned into the arena

    def join(self, step, nbytes):
        """Make room for a plan of `nbytes` and place `step` (and, if the arena moved, every
        other user) at the arena's offset via ``step.place(offset)``."""
        self._users.add(step)
        weakref.finalize(step, self._release_if_unused)
        if nbytes <= self.size:
            step.place(self.offset)
            return
        self._resize(nbytes)
        for user in list(self._users):
            user.place(self.offset)

    def leave(self, step):
        self._users.discard(step)
        self._release_if_unused()

    def _resize(self, nbytes):
        if self.offset is not None:
            self.pool.free(self.offset)
        try:
            self.offset = self.pool.alloc(nbytes, owner="graph arena (shared by compiled steps)")
        except MemoryError:
            if self.offset is not None:  # put the old arena back for the steps already in it
                self.offset = self.pool.alloc(self.size, owner="graph arena")
            raise
        self.size = nbytes

    def _release_if_unused(self):
        if self.offset is not None and not any(True for _ in self._users):
            self.pool.free(self.offset)
            self.offset, self.size = None, 0
