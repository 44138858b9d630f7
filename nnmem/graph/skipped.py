"""SkippedStep: how a step's compute phase ends the step before its commit, on purpose.

Dynamic loss scaling (nnmem/optim/loss_scale.py) checks the step's gradients for inf and NaN
after backward. Where it finds one, the step must change nothing, as a failed step changes
nothing: its host check raises SkippedStep, the commit phase (every parameter update) does not
run, and Model puts back what the forward pass changed (BatchNorm's running statistics, the
dropout counter) from the step's undo record. A replayed step catches it itself and returns its
outputs (executor.py); an eager step's optimizer catches it where it checks.
"""


class SkippedStep(Exception):
    """Raised by a call of the compute phase: end the step here, without its commit."""
