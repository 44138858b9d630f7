"""Memory before running: plan a training step on shapes alone.

``plan(model, input_shape)`` compiles the model on a *planning device* (nnmem.device
.create_planning_device: its pool hands out offsets with no bytes behind them), records one
training step in graph mode (recording never runs a kernel), and compiles the recording as
``model.compile`` and graph mode would on a CPU device, once per technique:

- baseline:               recycling off, every block of the step kept until it ends;
- liveness:               each block freed after its last use (plus in-place, static plan);
- liveness + recompute:   cheap forward results dropped and rebuilt in backward;
- liveness + offload:     activations moved to host memory between forward and backward
                          (graph/offload.py; their host bytes are reported apart);
- all three:              offloading the checkpoints that recomputation keeps (SuperNeurons);
- optimal (memory="optimal", with a budget): keep, recompute or offload per tensor, the
                          fastest plan within the budget (graph/optimal.py).

``frontier(model, input_shape)`` solves the optimal plan at many budgets, from the liveness
peak down to the smallest feasible: the time/memory Pareto curve, with every heuristic as a
point on the same axes, timed by the same cost model (graph/costs.py). The planner is the
graph compiler itself, on the same allocator: its peak is the pool's measured peak, byte for
byte. ``smallest_pool(model, input_shape)`` runs training steps and an evaluation on a
planning device, eagerly or in graph mode: the pool size they need, fragmentation included.
All call ``model(tx, ty, *step_args)``; SINGA's models take two more arguments,
``train_one_batch(self, x, y, dist_option, spars)``, which get the values SINGA's
train_cnn.py passes on one device, ``'plain'`` and ``None``, when ``step_args`` is not given.
"""

import inspect
import numbers
from typing import NamedTuple

import numpy as np

from nnmem import device, opt, tensor
from nnmem.graph import optimal
from nnmem.graph.fuse import Fusion
from nnmem.graph.optimal import OptimalPlanner
from nnmem.graph.plan import pool_bytes_needed
from nnmem.memory import format_bytes
from nnmem.step_options import MEMORY, StepOptions

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
    offload: str = "none"  # the offload policy ("dyn": the one it chose; "optimal")
    host_bytes: int = 0  # host memory the offloaded tensors take
    optimal: object = None  # memory="optimal": what the planner decided (OptimalPlan)

    def fits(self, budget):
        return budget is None or self.peak_bytes <= budget


class StepPlan(NamedTuple):
    model: str
    input_shape: tuple
    persistent_bytes: int  # parameters, optimizer state, inputs, results
    nodes: int
    techniques: list  # TechniquePlan, in the order baseline, liveness, recompute, offload...
    fusion: Fusion = Fusion({}, 0, 0)  # what the fusion pass did (graph/fuse.py)

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
    memory="heuristic",
    link_gbps=None,
    fuse=True,
    precision="float32",
):
    """A StepPlan for training `model` (a new, uninitialised Model: it is compiled on a
    planning device) on batches of `input_shape` (batch first) with class-id labels.
    `offload`: the policy of the offloading techniques ("none" leaves them out; "dyn" takes
    the fastest policy that fits `budget`, or "all" when none does or no budget is given);
    they are checked as compile checks them. `step_args`: the arguments of train_one_batch
    after x and y (default: see the module's docstring). `tensors`: keep every technique's
    tensors in its timeline (``timeline.tensors``, what the memory viewer shows).
    `progress`: None, or a function called with the name of each stage as it starts,
    "recording" and then each technique's (nnmem plan shows them).
    `memory`: "optimal" adds the row "optimal", the fastest plan within `budget` (which it
    requires); NoPlanFits (graph/optimal.py) when no plan fits it. `link_gbps`: the copy
    link's speed its cost model assumes (None: graph/costs.py's default). `fuse`, `precision`:
    compile's (precision="float16": mixed precision, its float32 masters counted)."""
    progress = progress or _no_progress
    _check_new(model)
    if offload == "dyn" and budget is None:
        offload = "all"  # no budget to fit: what "dyn" plans when no policy fits
    if memory == "optimal" and budget is None:
        raise ValueError("plan(memory='optimal') finds the fastest plan within a budget: give one")
    if memory not in MEMORY:
        raise ValueError(f"plan(memory={memory!r}): choose one of {MEMORY}")
    # No device yet: the planning device made below has no limit to check the budget against.
    options = StepOptions(True, sequential, recompute, offload, budget, precision=precision)
    budget = options.check(None, "plan").budget
    dev = device.create_planning_device(link_gbps=link_gbps)
    progress("recording")
    step = _recorded_step(
        model, input_shape, dev, sequential, optimizer, dtype, step_args, fuse, precision
    )
    techniques = []
    variants = [
        ("baseline", False, "none", "none"),
        ("liveness", True, "none", "none"),
        ("liveness + recompute", True, recompute, "none"),
    ]
    if offload != "none":
        variants += [("liveness + offload", True, "none", offload)]
        variants += [("all three", True, recompute, offload)]
    for name, recycle, recompute_policy, offload_policy in variants:
        progress(name)
        with dev.recycling(recycle):
            if offload_policy == "dyn":
                offload_policy = step.choose_offload(sequential, recompute_policy, budget) or "all"
            step.replan(sequential, recompute_policy, offload_policy)
            techniques.append(_summarise(name, step, tensors))
            if name == "liveness":
                fusion = Fusion.of(step.fusions, step.fusion_saving())
    if memory == "optimal":
        progress("optimal")
        step.plan_optimal(sequential, budget)
        techniques.append(_summarise("optimal", step, tensors))
    return StepPlan(
        type(model).__name__,
        step.inputs[0].shape,
        step.persistent_bytes,
        len(step.recorded),
        techniques,
        fusion,
    )


class FrontierPoint(NamedTuple):
    """One budget of the frontier: the fastest plan that fits it (graph/optimal.py)."""

    budget: int
    peak_bytes: int  # the pool the placed plan needs (<= budget)
    predicted_seconds: float  # the cost model's time of the plan (costs.plan_seconds)
    lower_bound_seconds: float  # the program's bound, in its model (graph/optimal.py)
    gap: float  # the program's gap
    recomputed: int  # tensors rebuilt in backward
    offloaded: int  # tensors moved to host memory (activations and weight gradients)
    kept: int  # tensors that backward (or the commit) reads and that stay on the device
    source: str  # "solver", or the heuristic whose plan was faster (OptimalPlan.source)


class HeuristicPoint(NamedTuple):
    """A heuristic's plan on the frontier's axes: its pool and its time, by the same model."""

    technique: str  # e.g. "recompute speed + offload conv"
    peak_bytes: int
    predicted_seconds: float


class Frontier(NamedTuple):
    model: str
    input_shape: tuple
    persistent_bytes: int
    step_seconds: float  # the step with no technique, by the cost model
    cost_source: str  # "measured" or "flop model" (graph/costs.py)
    smallest_bytes: int  # the smallest pool the optimal plan fits
    proven_bytes: int  # no plan of this step fits in less (the solver's proof)
    points: list  # FrontierPoint, budgets from the largest down
    heuristics: list  # HeuristicPoint


#: The heuristics drawn beside the frontier, and their names (graph/optimal.py weighs them).
HEURISTICS = optimal.HEURISTICS
heuristic_name = optimal.heuristic_name


def frontier(
    model,
    input_shape,
    budgets=None,
    points=10,
    sequential=False,
    optimizer=None,
    dtype=np.float32,
    step_args=None,
    device_=None,
    time_limit=60.0,
    progress=None,
    link_gbps=None,
):
    """The Frontier of `model` (new and uninitialised) on batches of `input_shape`: the
    fastest plan at each of `budgets` (bytes of pool; default `points` budgets evenly spaced
    from the liveness peak down to the smallest the optimal plan fits, and the pool of each
    heuristic that fits), and each heuristic's plan as a point. Planned on a planning device
    (the flop model), or on `device_` (a CPU device: every operation's time is measured
    there, and the step is run once).
    `link_gbps`: the copy link's speed the planning device assumes (None: costs.py's
    default).
    `progress`: called with "budget ..." as each budget is solved (nnmem plan's stages)."""
    progress = progress or _no_progress
    _check_new(model)
    dev = device_ or device.create_planning_device(link_gbps=link_gbps)
    step = _recorded_step(model, input_shape, dev, sequential, optimizer, dtype, step_args)
    planner = OptimalPlanner(*step.recording(optimal=True), dev, sequential, joined=True)
    _, smallest, proven = planner.smallest(time_limit)
    heuristics = [
        HeuristicPoint(name, needed, seconds)
        for name, _, needed, seconds in planner.heuristic_plans()
    ]
    liveness = pool_bytes_needed(planner.liveness, dev, joined=True)
    if budgets is None:  # evenly spaced, and each heuristic's own pool: compared where it fits
        budgets = np.linspace(liveness, smallest, max(points, 2)).astype(int).tolist()
        budgets += [h.peak_bytes for h in heuristics]
    found = []
    # the smallest first: each larger budget may then take a smaller one's plan if it is
    # faster (OptimalPlanner.plan), so the curve never rises with the budget
    for budget in sorted({int(b) for b in budgets}):
        if budget < smallest:
            continue
        planned, decided = planner.plan(budget, time_limit)
        recomputed, offloaded = len(decided.decisions.recompute), len(decided.decisions.offload)
        found.append(
            FrontierPoint(
                budget,
                decided.pool_bytes,
                decided.predicted_seconds,
                decided.lower_bound_seconds,
                decided.gap,
                recomputed,
                offloaded,
                len(decided.rows) - recomputed - offloaded,
                decided.source,
            )
        )
        progress(f"budget {format_bytes(budget)}")
    found.reverse()  # the largest budget first
    return Frontier(
        type(model).__name__,
        step.inputs[0].shape,
        planner.outside,
        planner.costs.step_seconds,
        planner.costs.source,
        smallest,
        proven,
        found,
        heuristics,
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


def _recorded_step(
    model, input_shape, dev, sequential, optimizer, dtype, step_args, fuse=True, precision="float32"
):
    """The CompiledStep of `model` (compiled here, in graph mode) training on a batch of
    `input_shape` on `dev`: recorded and planned with liveness (on a planning device nothing
    runs; on a CPU device the step runs once)."""
    tx, ty = _inputs(model, input_shape, dev, optimizer, dtype)
    step_args = _step_args(model, step_args)
    model.compile(
        [tx], is_train=True, use_graph=True, sequential=sequential, fuse=fuse, precision=precision
    )
    tx.set_value(0)  # written, so that reading them is allowed (a planning device only allocates)
    ty.set_value(0)
    model(tx, ty, *step_args)
    return model.compiled_step(tx, ty, *step_args)


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
    # A model may say what it takes (nnmem.sonnx's SONNXModel does: token ids, and a label
    # per token for a language model); otherwise `dtype` inputs and a class id per sample.
    dtype = getattr(model, "input_dtype", dtype)
    label_shape = getattr(model, "label_shape", lambda shape: (shape[0],))(input_shape)
    tx = tensor.PlaceHolder(input_shape, dev, dtype)
    ty = tensor.PlaceHolder(label_shape, dev, tensor.int32)
    return tx, ty


def _summarise(name, step, tensors=False):
    timeline = step.timeline
    position, operation = timeline.peak_position()
    # as nnmem plan's table names it: with the offload policy
    named = step.offload in ("none", "optimal")
    timeline.label = name if named else f"{name} ({step.offload})"
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
        step.optimal,
    )
