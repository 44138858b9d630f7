"""The ranks start equal: before a model's first training step they check that they built the
same model, then take rank 0's parameters and buffers, whatever their random seeds.

Contract: check_same_model raises DistributedError on every rank, naming the first difference,
when the states' names, shapes or dtypes differ; broadcast_parameters receives every value
before it writes any, so a failed broadcast changes nothing.
"""

import numpy as np

from nnmem.tensor import to_numpy


def check_same_model(communicator, model):
    """The model's states, sorted by name, once every rank holds the same names, shapes and
    dtypes (a digest, then the first difference named on every rank)."""
    states = sorted(model.get_states().items())
    communicator.check_same(
        "models (state names, shapes, dtypes)",
        [(name, tuple(t.shape), str(np.dtype(t.dtype))) for name, t in states],
    )
    return states


def broadcast_parameters(communicator, tensors):
    """Every rank's `tensors` = rank 0's (all received before any is written)."""
    values = [to_numpy(t) for t in tensors]
    for t, value in zip(tensors, values):
        communicator.call(f"broadcast of {t.name}", communicator.broadcast, value)
    if communicator.global_rank != 0:
        for t, value in zip(tensors, values):
            t.copy_from_numpy(value)
