"""nnmem train's --save-states and --resume: a checkpoint in SINGA's format (Model.save_states)
whose auxiliary states hold where training stands, so that a run can go on from it.

Auxiliary states (all 1-element int64 tensors, except the optimizer's per-parameter state):

    train.epochs_done           the epochs finished when the file was written
    train.dropout_counter       the device's count of dropout draws (only if a layer drew any)
    optimizer.step_counter      Optimizer.get_states()'s step counter
    optimizer.STATE.PARAMETER   its STATE of each parameter (SGD's "moments"), by name

A run resumed from the file with the flags of the run that wrote it (the same --seed: each
epoch's shuffle is a function of the seed and the epoch's number) trains the next epochs to
the bits of a run that was never stopped.
"""

import math

import numpy as np

from nnmem import device
from nnmem.checkpoint import CheckpointError
from nnmem.cli.arguments import UsageError
from nnmem.memory.pool import ALIGNMENT
from nnmem.tensor import Tensor, to_numpy

EPOCHS_DONE = "train.epochs_done"
DROPOUT_COUNTER = "train.dropout_counter"
OPTIMIZER = "optimizer."
STEP_COUNTER = OPTIMIZER + "step_counter"


def training_position(optimizer, dev, epochs_done):
    """{auxiliary state name: NumPy array} of the position after `epochs_done` epochs."""
    position = {EPOCHS_DONE: np.array([epochs_done], np.int64)}
    if dev.dropout_counter is not None and dev.dropout_counter.block.allocated:
        position[DROPOUT_COUNTER] = to_numpy(dev.dropout_counter).astype(np.int64)
    states = optimizer.get_states()
    position[STEP_COUNTER] = np.array([states.pop("step_counter")], np.int64)
    for kind, per_param in states.items():
        for name, array in per_param.items():
            position[f"{OPTIMIZER}{kind}.{name}"] = array
    return position


class Saver:
    """Writes the model's states and the training position to `path` after an epoch. The
    auxiliary tensors are staged on a CPU device of their own, made at the first save (and
    again only if the states grew): saving takes nothing from the training pool, where a tight
    --pool leaves no room."""

    def __init__(self, path):
        self.path = path
        self._staging = None

    def save(self, model, optimizer, dev, epochs_done):
        position = training_position(optimizer, dev, epochs_done)
        blocks = sum(math.ceil(max(a.nbytes, 1) / ALIGNMENT) for a in position.values())
        if self._staging is None or self._staging.pool.capacity < blocks * ALIGNMENT:
            self._staging = device.create_cpu_device(blocks * ALIGNMENT)
        aux = {
            name: Tensor(a.shape, self._staging, a.dtype, data=a, requires_grad=False)
            for name, a in position.items()
        }
        model.save_states(self.path, aux)


def resume(path, model, optimizer, dev):
    """Load the checkpoint `path` (written by --save-states) into the model, the optimizer
    (before its first step) and the device's dropout counter; return the epochs it had
    finished. CheckpointError, naming the file and the problem, if it is not such a file or
    does not match this model and optimizer: every check is made before the optimizer and the
    counter are set (the model's own states are checked before any is written)."""
    aux = {name: to_numpy(t) for name, t in model.load_states(path).items()}
    if EPOCHS_DONE not in aux or STEP_COUNTER not in aux:
        raise CheckpointError(
            f"{path}: it holds the model's states but not where training stood (no "
            f"{EPOCHS_DONE} or {STEP_COUNTER}): write it with nnmem train --save-states, or "
            "start from scratch without --resume"
        )
    epochs_done = _count(path, aux, EPOCHS_DONE)
    states = {"step_counter": _count(path, aux, STEP_COUNTER)}
    for name, array in aux.items():
        if name.startswith(OPTIMIZER) and name != STEP_COUNTER:
            kind, _, param = name[len(OPTIMIZER) :].partition(".")
            states.setdefault(kind, {})[param] = array
    _check_optimizer_states(path, states, model.get_params())
    try:
        optimizer.set_states(states)
    except (TypeError, ValueError) as e:  # another optimizer's states
        raise CheckpointError(f"{path}: its optimizer states do not fit this run: {e}") from None
    if DROPOUT_COUNTER in aux:
        dev.make_dropout_counter(Tensor).set_value(_count(path, aux, DROPOUT_COUNTER))
    return epochs_done


def _count(path, aux, name):
    """A non-negative whole count stored as a 1-element integer array."""
    a = aux[name]
    if a.shape != (1,) or a.dtype.kind not in "iu" or a[0] < 0:
        raise CheckpointError(
            f"{path}: {name} is {a.dtype} {a.shape}, where nnmem train writes one count >= 0"
        )
    return int(a[0])


def _check_optimizer_states(path, states, params):
    """Every per-parameter state in the file belongs to a parameter of the model, of its shape,
    and every parameter has one (set_states would check the shapes only at the first step)."""
    for kind, per_param in states.items():
        if kind == "step_counter":
            continue
        missing, unknown = (
            sorted(set(params) - set(per_param)),
            sorted(set(per_param) - set(params)),
        )
        if missing or unknown:
            raise CheckpointError(
                f"{path}: its optimizer {kind} do not match this model's parameters (missing "
                f"{missing}, unexpected {unknown})"
            )
        for name, array in per_param.items():
            if array.shape != params[name].shape:
                raise CheckpointError(
                    f"{path}: its optimizer {kind} of {name} has shape {array.shape}, the "
                    f"parameter {params[name].shape}"
                )


def resumed(args, model, optimizer, dev):
    """The epochs done by the checkpoint --resume names, loaded into the model, the optimizer
    and the device (resume.resume); a checkpoint that leaves no epoch to train is refused."""
    done = resume(args.resume, model, optimizer, dev)
    if done >= args.epochs:
        raise UsageError(
            f"argument --resume: {args.resume} was written after epoch {done}, and --epochs "
            f"{args.epochs} (the total) leaves none to train; give --epochs {done + 1} or more"
        )
    return done
