"""SINGA's device methods, under the names SINGA gives them: a part of Device (a mixin).

They are here for SINGA users' code (its examples call them), and nnmem's own code does not
call them: the graph ones answer from the recorder a Model sets (Device.recording), the
profiling ones hand over to the device's Profiler (profiler.py). SINGA's ``Sync`` and
``SetRandSeed`` are the device's own methods, in base.py.
"""


class SingaMethods:
    """SINGA's names on Device (the attributes they read are made by Device.__init__)."""

    def graph_enabled(self):
        """SINGA's: True while a model records its step on this device (the device buffers
        operations instead of running them)."""
        return self.recorder is not None

    def EnableGraph(self, enable):
        """SINGA's switch: False while recording runs operations at once (SINGA's layers turn
        buffering off to set up parameters); True resumes the recording it paused. Outside a
        recording there is nothing to switch (nnmem records per step, in Model)."""
        with self.lock:
            if not enable and self.recorder is not None:
                self._paused_recorder, self.recorder = self.recorder, None
            elif enable and self._paused_recorder is not None:
                self.recorder, self._paused_recorder = self._paused_recorder, None

    def ResetGraph(self):
        """SINGA's: it clears the operations a device buffered; an nnmem device buffers none
        outside a model's step (a compiled step belongs to its Model: model.graph() re-plans
        it)."""

    def SetVerbosity(self, verbosity):
        """SINGA's per-operation timing (profiler.py): 0 off, 1 per operation type, 2 per
        operation (layer:op)."""
        self.profiler.verbosity = int(verbosity)

    def SetSkipIteration(self, iterations):
        """SINGA's: leave the first `iterations` steps (JIT compilation, recording) out of the
        profile."""
        self.profiler.skip_iterations = int(iterations)

    def PrintTimeProfiling(self):
        """SINGA's: print where the time of the profiled steps went, most expensive first."""
        print(self.time_profile_table())

    def time_profile_table(self):
        """What PrintTimeProfiling prints, as a string."""
        return self.profiler.table()

    def id(self):
        """SINGA's: the device's number (a GPU's index; -1 for the host)."""
        return self.dev_id
