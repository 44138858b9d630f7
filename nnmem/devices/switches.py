"""The switches of a device, which change what its ``exec`` does: a part of Device (a mixin).

recycle   -- free a block as soon as nothing refers to it (default). Off: keep every block of
             a training step until the step ends, failed or not (SuperNeurons' network-wide
             allocation, the baseline every memory technique is measured against); outside a
             step, blocks are freed at once. In graph mode a compiled step's plan is made
             under the switch, and its next replay after a flip plans it again (off: the
             baseline plan; graph/executor.py, CompiledStep.follow_recycle_switch).
dry_run   -- run no kernel and allocate nothing (Model.compile's shape-only pass).
recorder  -- while a Model records its step, exec calls are appended to it, not run.
workspace_limit -- the most bytes a convolution's "auto" workspace may take, or None (as free
             memory allows); offload="dyn" lowers it.
cache     -- eager offloading's LRU tensor cache (memory/cache.py), or None; it keeps the pool
             under its ``budget``.
memory_samples -- a list, to which every kernel run appends (name, allocated bytes, live
             blocks): the raw data of a measured Timeline (nnmem.measure); or None.

Model, the planners and the measurements read them, and change them only through the methods
here, which hold the device's lock: never in the middle of another thread's step. ``recycle``
is also the switch a learner flips by hand (``dev.recycle = False``). The context managers put
the old value back however the block ends.
"""

import contextlib


class Switches:
    """Device's switches (the attributes are made by Device.__init__)."""

    def _switched(self, name, value):
        """Set attribute `name` to `value` for the block, holding the lock: another thread's
        step waits, and never runs under the setting; the old value is back afterwards."""
        return self._switched_on(self, name, value)

    @contextlib.contextmanager
    def _switched_on(self, owner, name, value):
        """_switched, for an attribute of `owner` (the device, or its pool)."""
        with self.lock:
            previous = getattr(owner, name)
            setattr(owner, name, value)
            try:
                yield value
            finally:
                setattr(owner, name, previous)

    def recycling(self, recycle):
        """A context manager: ``recycle`` on or off for the block."""
        return self._switched("recycle", recycle)

    def dry_run_pass(self):
        """A context manager: a pass that runs no kernel and allocates nothing (Model.compile
        runs its forward once like this, to learn the shapes and make the layers)."""
        return self._switched("dry_run", True)

    def recording(self, recorder):
        """A context manager: every exec in the block is appended to `recorder`, not run (a
        Model recording its step: graph/recorder.py)."""
        return self._switched("recorder", recorder)

    def limit_workspaces(self, limit):
        """A context manager: a convolution's "auto" workspace takes at most `limit` bytes in
        the block (None: as free memory allows). offload="dyn" records a step again with a
        lower limit when its plan does not fit the budget (Model)."""
        return self._switched("workspace_limit", limit)

    def without_budget(self):
        """A context manager: the pool's budget lifted for the block. memory="optimal" records
        its step so, that the convolutions size their workspaces from the pool, not from what
        the budget leaves: the recording (and so its numbers) is then the same at every
        budget, and the plan, not the free memory, is held to the budget."""
        return self._switched_on(self.pool, "budget", None)

    def sampling_memory(self):
        """A context manager yielding a new list, to which every kernel run in the block
        appends (name, allocated bytes, live blocks): a measured Timeline (nnmem.measure)."""
        return self._switched("memory_samples", [])

    def bypassing_cache(self):
        """A context manager: allocations in the block come from the pool alone, as if no
        tensor cache were on (TensorCache.bring_back: only a cache fetches what it evicted,
        and while it does so it must not evict)."""
        return self._switched("cache", None)

    def set_memory_budget(self, budget, cache):
        """Model.compile's memory settings, under the lock: the pool's `budget` (bytes it may
        allocate; None: all of it) and eager offloading's tensor cache (a TensorCache, or
        None). The cache replaced first brings back every tensor it evicted; if they do not
        fit (OutOfMemory), nothing changes."""
        with self.lock:
            if self.cache is not None:
                self.cache.bring_back()
            self.pool.budget = budget
            self.cache = cache

    @property
    def instrumented(self):
        """True while something watches each kernel call (SINGA's profiler, or
        sampling_memory()): a replay then calls run_kernel for each, not a CUDA graph."""
        return bool(self.profiler.verbosity) or self.memory_samples is not None
