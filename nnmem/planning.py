"""Memory before running: plan a training step on shapes alone.

``plan(model, input_shape)`` compiles the model on a *planning device* (nnmem.device
.create_planning_device: its pool hands out offsets with no bytes behind them), records one
training step in graph mode (recording never runs a kernel), and compiles the recording three
ways, exactly as ``model.compile`` and graph mode would on a CPU device:

- baseline:               recycling off, every block of the step kept until it ends;
- liveness:               each block freed after its last use (plus in-place, static plan);
- liveness + recompute:   cheap forward results dropped and rebuilt in backward;
- liveness + offload:     activations moved to host memory between forward and backward
                          (graph/offload.py; their host bytes are reported apart);
- all three:              offloading the checkpoints that recomputation keeps (SuperNeurons).

Because the planner is the graph compiler itself, running on the same allocator, its peak is
the peak a real graph-mode iteration measures in the pool, byte for byte.

``smallest_pool(model, input_shape)`` runs training steps and an evaluation on a planning device,
eagerly or in graph mode, and returns the pool size they need, fragmentation included.

Both call ``model(tx, ty, *step_args)``. SINGA's models take two more arguments,
``train_one_batch(self, x, y, dist_option, spars)``; when ``step_args`` is not given, those
get the values SINGA's train_cnn.py passes on one device, ``'plain'`` and ``None``.
"""

import inspect
import numbers
from typing import NamedTuple

import numpy as np

from nnmem import device, opt, tensor
from nnmem.step_options import StepOptions

#: The extra arguments of SINGA's train_one_batch(self, x, y, dist_option, spars), as SINGA's
#: cnn/train_cnn.py passes them when training on one device.
SINGA_STEP_ARGUMENTS = {"dist_option": "plain", "spars": None}


class TechniquePlan(NamedTuple):
    technique: str
    peak_bytes: int  # pool peak of a training iteration: persistent + plan arena
    lower_bound_bytes: int  # the step's lower bound: persistent + the arena's lower bound
    live_tensors_at_peak: int
    peak_position: int  # in the replay order
    peak_operation: str  # "layer:Op" at the peak
    recomputations: int  # extra forward operations run in backward
    timeline: object  # memory.timeline.Timeline: bytes and live tensors per position
    offload: str = "none"  # the offload policy ("dyn": the one it chose)
    host_bytes: int = 0  # host memory the offloaded tensors take

    def fits(self, budget):
        return budget is None or self.peak_bytes <= budget


class StepPlan(NamedTuple):
    model: str
    input_shape: tuple
    persistent_bytes: int  # parameters, optimizer state, inputs, results
    nodes: int
    techniques: list  # TechniquePlan, in the order baseline, liveness, recompute, offload...

    def best(self):
        return min(self.techniques, key=lambda t: t.peak_bytes)


def plan(
    model,
    input_shape,
    recompute="cost-aware",
    sequential=False,
    optimizer=None,
    dtype=np.float32,
    offload="all",
    budget=None,
    step_args=None,
    tensors=False,
    progress=None,
):
    """A StepPlan for training `model` (a new, uninitialised Model: it is compiled on a
    planning device) on batches of `input_shape` (batch first) with class-id labels.
    `offload`: the policy of the offloading techniques ("none" leaves them out; "dyn" takes
    the fastest policy that fits `budget`, or "all" when none does or no budget is given);
    they are checked as compile checks them. `step_args`: the arguments of train_one_batch
    after x and y (default: see the module's docstring).
    `tensors`: keep every technique's tensors in its timeline (``timeline.tensors``, what
    the memory viewer shows; for a deep network, many rows).
    `progress`: None, or a function called with the name of each stage as it starts,
    "recording" and then each technique's (a deep network takes seconds to minutes: nnmem plan
    shows them)."""
    progress = progress or _no_progress
    _check_new(model)
    if offload == "dyn" and budget is None:
        offload = "all"  # no budget to fit: what "dyn" plans when no policy fits
    # No device yet: the planning device made below has no limit to check the budget against.
    budget = StepOptions(True, sequential, recompute, offload, budget).check(None, "plan").budget
    dev = device.create_planning_device()
    tx, ty = _inputs(model, input_shape, dev, optimizer, dtype)
    step_args = _step_args(model, step_args)
    progress("recording")
    model.compile([tx], is_train=True, use_graph=True, sequential=sequential)
    tx.set_value(0)  # written, so that reading them is allowed (a planning device only allocates)
    ty.set_value(0)
    model(tx, ty, *step_args)  # records and compiles (liveness), runs nothing
    step = model.compiled_step(tx, ty, *step_args)
    techniques = []
    variants = [
        ("baseline", False, "none", "none"),
        ("liveness", True, "none", "none"),
        ("liveness + recompute", True, recompute, "none"),
    ]
    if offload != "none":
        variants += [
            ("liveness + offload", True, "none", offload),
            ("all three", True, recompute, offload),
        ]
    for name, recycle, recompute_policy, offload_policy in variants:
        progress(name)
        with dev.recycling(recycle):
            if offload_policy == "dyn":
                offload_policy = step.choose_offload(sequential, recompute_policy, budget) or "all"
            step.replan(sequential, recompute_policy, offload_policy)
            techniques.append(_summarise(name, step, tensors))
    return StepPlan(
        type(model).__name__, tx.shape, step.persistent_bytes, len(step.recorded), techniques
    )


def smallest_pool(
    model,
    input_shape,
    use_graph=True,
    sequential=False,
    recompute="none",
    optimizer=None,
    dtype=np.float32,
    step_args=None,
    plans_for="cpu",
    offload="none",
):
    """The smallest pool, in bytes, in which `model` (a new, uninitialised Model) trains on
    batches of `input_shape` and is then evaluated on the same input tensor, as ``nnmem train``
    does: the pool's high-water mark (fragmentation included) over compile, two training steps
    (the first creates the optimizer's state) and an inference step, run on a planning device,
    where every allocation happens and no kernel runs. In graph mode it is exact: a byte less
    runs out of memory. Eagerly it is enough, and a little less may do: in a smaller pool, best
    fit places the blocks differently. `step_args`: as for plan(). `plans_for`: the kind of
    device that will run it, "cpu" or "cuda" (they size convolution workspaces differently).
    `offload`: "none", "conv" or "all", a graph's offload policy (eagerly, the tensor cache
    moves nothing while memory lasts, so the pool that fits is the one without it)."""
    _check_new(model)
    if offload not in ("none", "conv", "all"):
        raise ValueError(f"smallest_pool(offload={offload!r}): choose 'none', 'conv' or 'all'")
    dev = device.create_planning_device(plans_for=plans_for)
    tx, ty = _inputs(model, input_shape, dev, optimizer, dtype)
    step_args = _step_args(model, step_args)
    model.compile(
        [tx],
        is_train=True,
        use_graph=use_graph,
        sequential=sequential,
        recompute=recompute,
        offload=offload if use_graph else "none",
    )
    tx.set_value(0)
    ty.set_value(0)
    for _ in range(2):
        model(tx, ty, *step_args)
    model.eval()
    model(tx)
    return dev.memory_stats()["high_water_bytes"]


def _no_progress(stage):
    """plan()'s `progress` when none is given: the stages go unreported."""


def _step_args(model, step_args):
    """The arguments after x and y of a training step: `step_args` when given, else the values
    of SINGA_STEP_ARGUMENTS for the parameters train_one_batch requires after x and y."""
    if step_args is not None:
        return tuple(step_args)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = list(inspect.signature(model.train_one_batch).parameters.values())
    required = [p.name for p in parameters[2:] if p.kind in positional and p.default is p.empty]
    unknown = [name for name in required if name not in SINGA_STEP_ARGUMENTS]
    if unknown:
        raise TypeError(
            f"{type(model).__name__}.train_one_batch requires {', '.join(unknown)} after x and "
            "y: pass their values as step_args=(...)"
        )
    return tuple(SINGA_STEP_ARGUMENTS[name] for name in required)


def _check_new(model):
    """plan() and smallest_pool() compile the model on a planning device of their own: one
    compiled before lives on another device."""
    if model.initialized:
        raise ValueError(
            f"{type(model).__name__} was compiled already (by compile(), plan() or "
            "smallest_pool()); give a new, uninitialised model, e.g. create_model(...) again"
        )


def _inputs(model, input_shape, dev, optimizer, dtype):
    """Set the optimizer (SGD with momentum by default) and return input and label tensors of
    `input_shape` (batch first) on `dev`."""
    if not all(isinstance(s, numbers.Integral) for s in input_shape):
        raise ValueError(f"input shape {tuple(input_shape)}: the sizes must be whole numbers")
    input_shape = tuple(int(s) for s in input_shape)
    if len(input_shape) < 2 or min(input_shape) <= 0:
        raise ValueError(
            f"input shape {input_shape}: give (batch, ...) with positive sizes, "
            "e.g. (16, 3, 224, 224)"
        )
    model.set_optimizer(optimizer or opt.SGD(lr=0.01, momentum=0.9))
    tx = tensor.PlaceHolder(input_shape, dev, dtype)
    ty = tensor.PlaceHolder((input_shape[0],), dev, tensor.int32)
    return tx, ty


def _summarise(name, step, tensors=False):
    timeline = step.timeline
    position, operation = timeline.peak_position()
    # as nnmem plan's table names it: with the offload policy
    timeline.label = name if step.offload == "none" else f"{name} ({step.offload})"
    if tensors:
        timeline.tensors = step.live_tensors()
    return TechniquePlan(
        name,
        step.persistent_bytes + step.layout.arena_bytes,
        step.persistent_bytes + step.layout.lower_bound,
        timeline.live[position],
        position,
        operation,
        step.recomputations,
        timeline,
        step.offload,
        step.host_layout.arena_bytes,
    )
