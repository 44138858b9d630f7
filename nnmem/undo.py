"""The undo record of a training step. Contract: a step that fails before its commit leaves
parameters, optimizer state, BatchNorm's running statistics and the dropout counter as they
were (its memory goes back to the pool as its tensors die).

Parameters change only in the commit (nnmem.opt: an optimizer step has two phases), so a step
that fails before it has not touched them. What it may have changed by then is recorded before
it starts, and put back:

- the buffers forward writes (BatchNorm's running statistics, the dropout counter): host
  copies, a few numbers per channel;
- the random generator's state, so that a failed step draws no mask;
- which optimizer state existed: what the failed step made (a first step's momentum buffers)
  is dropped again, unless a graph the step compiled was kept (its plan holds that state).

``Model.__call__`` takes an ``UndoRecord.record(...)`` before each training step and calls its
``restore()`` when the step fails; after the commit (work that follows the optimizer in an
eager step) the step is applied and there is nothing to undo.
"""

from typing import NamedTuple

from nnmem.interrupts import deferred_interrupts


class UndoRecord(NamedTuple):
    commits: int  # the device's commits when the step began: a failure before the next undoes
    device: object
    copies: list  # (buffer, its value on the host)
    counter_existed: bool  # the dropout counter (made by the first draw: maybe in this step)
    numpy_rng_state: dict  # Device.rng's state (NumPy's generator: parameter initialisation)
    optimizer: object
    optimizer_mark: object  # optimizer.state_mark()
    graphs: object  # the model's StepCache
    graph_count: int

    @classmethod
    def record(cls, dev, buffers, optimizer, graphs):
        """The undo record of the training step about to run on `dev`: `buffers` are the
        model's states other than parameters, `graphs` its StepCache."""
        buffers = list(buffers)
        if dev.dropout_counter is not None:
            buffers.append(dev.dropout_counter)
        buffers = [t for t in buffers if t.block.allocated and dev.runs_kernels]
        copies = list(zip(buffers, dev.snapshot(buffers)))
        counter_existed = dev.dropout_counter is not None and dev.dropout_counter.block.allocated
        return cls(
            dev.commits,
            dev,
            copies,
            counter_existed,
            dev.rng.bit_generator.state,
            optimizer,
            optimizer.state_mark(),
            graphs,
            len(graphs),
        )

    def restore(self):
        """Put back what the failed step changed, if it failed before its commit. All of it:
        a Ctrl-C waits for the end (a second one would leave BatchNorm's statistics half
        written back)."""
        if self.device.commits != self.commits:
            return  # the step is applied
        with deferred_interrupts("interrupted; the failed step was undone first"):
            dev = self.device
            # The copies were queued on the compute stream (a GPU may still be making them);
            # only that stream is waited for: an unrelated copy's error must not stop the undo.
            dev.compute_stream.synchronize()
            for t, value in self.copies:
                t.copy_from_numpy(value)
            if not self.counter_existed and dev.dropout_counter is not None:
                # made by the failed step: a retry draws the same masks
                dev.dropout_counter.set_value(0)
            dev.rng.bit_generator.state = self.numpy_rng_state
            if len(self.graphs) == self.graph_count:  # no graph kept that holds the new state
                self.optimizer.forget_state_since(self.optimizer_mark)
