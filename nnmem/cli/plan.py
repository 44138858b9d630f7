"""nnmem plan: how much memory a training step needs, before running it (shapes only).

For baseline (every block kept until the step ends), liveness, liveness + recomputation,
liveness + offload and all three (--offload picks the policy; none leaves them out) it
prints the peak, the lower bound, the live tensors at the peak, the operation where the peak
happens, the extra recomputed operations and the host memory offloading takes; with
--budget, which fit; with --find-depth / --find-batch, the deepest ResNet or the largest
batch that fits; with --timeline FILE.html, the memory viewer of the planned techniques (a
click on an operation lists the tensors live there), or with FILE.png their plot.

Without --input and --batch-size it plans the step that ``nnmem train`` runs for the same
--model: a batch of 64 of the shipped digits (1x28x28).
"""

import functools

import numpy as np

from nnmem.cli.arguments import (
    UsageError,
    byte_size,
    format_shape,
    positive_float,
    positive_int,
    resnet_depth,
    sample_shape,
    timeline_path,
)
from nnmem.cli.flags import (
    DATA_SAMPLES,
    DEFAULT_BATCH,
    DEFAULT_DATA,
    DEFAULT_DEPTH,
    PAPER_SAMPLES,
    check_depth_rules,
    check_offload_flags,
    depth_of,
    image_too_small,
)
from nnmem.cli.timeline import require_matplotlib, write_timeline
from nnmem.graph.offload import POLICIES
from nnmem.memory import OutOfMemory, format_bytes
from nnmem.models import MODELS, create_model, resnet
from nnmem.planning import plan
from nnmem.search import largest_fitting

#: One sample of nnmem train's default data, the digits (1x28x28).
TRAIN_SAMPLE = DATA_SAMPLES[DEFAULT_DATA]
# Models whose pooling shrinks a 28x28 image to nothing (flags.SMALLEST_IMAGE: they cannot
# train on the digits) are planned on the input of their papers (flags.PAPER_SAMPLES) instead.
#: --find-depth stops at ResNet-4000: beyond SuperNeurons' ResNet-2500, which offloading and
#: recomputation reach in a budget of a GPU's size; planning one takes about a minute, and the
#: search's cost grows with the depth it reaches.
MAX_SEARCH_DEPTH = 4000
#: --find-batch stops at 2**20 samples (planning costs the same at any batch size).
MAX_SEARCH_BATCH = 2**20


def add_parser(commands):
    p = commands.add_parser("plan", help="plan a training step's memory on shapes alone")
    p.add_argument("--model", default="resnet", help=f"one of {', '.join(sorted(MODELS))}")
    p.add_argument(
        "--depth", type=resnet_depth, default=None, help=f"ResNet depth (default {DEFAULT_DEPTH})"
    )
    p.add_argument(
        "--stem",
        default=None,
        choices=["cifar", "imagenet"],
        help="ResNet stem (default: imagenet for inputs of 64 pixels or more)",
    )
    p.add_argument("--block", default=None, choices=["basic", "bottleneck"])
    p.add_argument("--width", type=positive_float, default=1.0, help="channel multiplier")
    p.add_argument("--num-classes", type=positive_int, default=None)
    p.add_argument(
        "--batch-size",
        "--batch",
        type=positive_int,
        default=None,
        help=f"samples per batch (default {DEFAULT_BATCH}, as nnmem train)",
    )
    p.add_argument(
        "--input",
        type=sample_shape,
        default=None,
        help="one sample's shape, e.g. 3x224x224 (default: what nnmem train feeds "
        "the model, 1x28x28; 3x227x227 for alexnet, 3x224x224 for vgg16)",
    )
    p.add_argument("--recompute", default="cost-aware", choices=["speed", "memory", "cost-aware"])
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "float16"],
        help="the dtype of inputs, parameters and activations (float16: storage, half the "
        "bytes; kernels compute in float32)",
    )
    p.add_argument(
        "--offload",
        default="all",
        choices=list(POLICIES),
        help="the policy of the offloading rows (none: leave them out; dyn: the fastest "
        "that fits --budget)",
    )
    p.add_argument(
        "--budget", type=byte_size, default=None, help="memory available, e.g. 12GiB, 512MiB, bytes"
    )
    p.add_argument(
        "--sync-offload",
        action="store_true",
        help="plan for vDNN's synchronous engine (the same memory as the asynchronous one: "
        "the engines differ in when they wait, not in what they keep)",
    )
    p.add_argument(
        "--timeline",
        type=timeline_path,
        metavar="FILE",
        default=None,
        help="FILE.html: write the memory viewer of the planned techniques (click an operation "
        "to list the tensors live there, see the arena's layout); FILE.png: plot them, with "
        "the data beside it as JSON",
    )
    search = p.add_mutually_exclusive_group()
    search.add_argument(
        "--find-depth",
        action="store_true",
        help=f"the deepest ResNet that fits the budget (up to {MAX_SEARCH_DEPTH})",
    )
    search.add_argument(
        "--find-batch",
        action="store_true",
        help=f"the largest batch that fits the budget (up to {MAX_SEARCH_BATCH})",
    )
    p.set_defaults(run=run)


def run(args):
    if args.model not in MODELS:
        raise UsageError(
            f"argument --model: unknown model {args.model!r}; choose one of "
            f"{', '.join(sorted(MODELS))}"
        )
    if (args.find_depth or args.find_batch) and args.budget is None:
        raise UsageError(
            "--find-depth and --find-batch search against a memory budget: "
            "add --budget, e.g. --budget 12GiB"
        )
    check_offload_flags(args, default_offload="all", example_budget="12GiB")
    require_matplotlib(args.timeline)
    if args.find_depth and args.model != "resnet":
        raise UsageError("argument --find-depth: it searches ResNet depths; use --model resnet")
    check_flags_apply(args)
    args.depth = depth_of(args)
    if args.batch_size is None:
        args.batch_size = DEFAULT_BATCH
    sample = args.input or PAPER_SAMPLES.get(args.model, TRAIN_SAMPLE)
    smallest = image_too_small(args.model, sample)
    if smallest is not None:
        raise UsageError(
            f"argument --input: {args.model} needs images of at least {smallest}x{smallest}, "
            f"got {format_shape(sample)}; e.g. --input "
            f"{format_shape(PAPER_SAMPLES[args.model])}, as in its paper"
        )
    if args.model == "resnet" and not args.find_depth:
        # the depth's own rules (6n + 2, ...), before anything is planned
        check_depth_rules(lambda: _model(args, sample, args.depth))
    # planned(batch, depth) -> StepPlan; cached, so that the search's winner is not planned twice
    planned = functools.cache(functools.partial(_planned, args, sample))
    found = True
    if args.find_depth:
        args.depth = find_depth(args, planned, valid_depths(args, sample))
        found = args.depth is not None
    elif args.find_batch:
        args.batch_size = find_batch(args, planned)
        found = args.batch_size is not None
    if not found:
        # the search found nothing that fits: there is no plan to print or to view
        if args.timeline:
            print(f"  no memory viewer written to {args.timeline}: no step fits the budget")
        return 0
    step = planned(args.batch_size, args.depth)
    if isinstance(step, StepTooLarge):
        raise step
    print_plan(step, args.budget)
    if args.timeline:
        if step.techniques[0].timeline.tensors is None:  # a search's plan: planned again
            step = _plan(args, sample, args.batch_size, args.depth, tensors=True)
        write_plan_timeline(args, step)
    return 0


def check_flags_apply(args):
    """Refuse a flag the plan would ignore: a ResNet's shape for another model, or the value a
    search is about to find."""
    if args.model != "resnet":  # (--depth: depth_of, as nnmem train)
        for flag, value in (("--stem", args.stem), ("--block", args.block)):
            if value is not None:
                raise UsageError(
                    f"argument {flag}: it shapes a ResNet, and --model {args.model} is not one; "
                    "leave it out, or use --model resnet"
                )
    for search, flag, value in (
        ("--find-depth", "--depth", args.find_depth and args.depth),
        ("--find-batch", "--batch-size/--batch", args.find_batch and args.batch_size),
    ):
        if value:
            raise UsageError(f"argument {flag}: {search} searches for it; leave one of the two out")


def write_plan_timeline(args, step):
    """--timeline: every technique of `step` (a StepPlan with its tensors), the viewer showing
    liveness first; a plot gets liveness's lower bound."""
    liveness = next(t for t in step.techniques if t.technique == "liveness")
    write_timeline(
        args.timeline,
        [t.timeline for t in step.techniques],
        f"{step.model}, input {format_shape(step.input_shape)}: memory of one training step, "
        "planned",
        lower_bound=liveness.lower_bound_bytes,
        selected="liveness",
    )


def find_depth(args, planned, depths):
    """Print and return the deepest of `depths` that fits --budget (None if none does)."""
    depth = largest_fitting(lambda d: _fits(planned(args.batch_size, d), args.budget), depths)
    print(f"deepest ResNet that fits {format_bytes(args.budget)}: {_found(depth, depths)}")
    return depth


def find_batch(args, planned):
    """Print and return the largest batch that fits --budget (None if none does)."""
    batches = range(1, MAX_SEARCH_BATCH + 1)
    batch = largest_fitting(lambda b: _fits(planned(b, args.depth), args.budget), batches)
    print(f"largest batch that fits {format_bytes(args.budget)}: {_found(batch, batches)}")
    return batch


class StepTooLarge(UsageError):
    """A step larger than the planning device's pool (1 PiB), or whose sizes overflow: the
    --input or --width is too large. `capacity` is the pool's size (None for an overflow)."""

    def __init__(self, message, capacity=None):
        super().__init__(message)
        self.capacity = capacity


def _fits(planned, budget):
    """Whether a step fits `budget`, for the searches: `planned` is what `_planned` returns, a
    StepPlan or the StepTooLarge error. A step too large to plan needs more than the planning
    pool, so it does not fit a budget no larger than that pool (a budget beyond it cannot be
    decided, and the error says so)."""
    if isinstance(planned, StepTooLarge):
        if planned.capacity is not None and budget > planned.capacity:
            raise planned
        return False
    return planned.best().fits(budget)


def _found(value, candidates):
    """How a search's result reads: "none", the value, or, when the search reached its last
    candidate, "at least N (the search stops at N)"."""
    if value is None:
        return "none"
    if value == candidates[-1]:
        return f"at least {value} (the search stops at {value})"
    return str(value)


def _stem(args, sample):
    return args.stem or ("imagenet" if len(sample) == 3 and min(sample[1:]) >= 64 else "cifar")


def _model(args, sample, depth):
    kwargs = dict(
        depth=depth,
        stem=_stem(args, sample),
        block=args.block,
        width=args.width,
        num_channels=sample[0],
    )
    if args.num_classes:
        kwargs["num_classes"] = args.num_classes
    return create_model(args.model, **kwargs)


def _planned(args, sample, batch, depth):
    """The StepPlan of a step or, for a step too large to plan, the StepTooLarge error:
    returned, so that functools.cache keeps it as it keeps a plan; run() raises it."""
    try:
        return _plan(args, sample, batch, depth)
    except StepTooLarge as e:
        return e


def _plan(args, sample, batch, depth, tensors=None):
    """plan() of the model the flags describe. A step that does not fit the planning device is
    a StepTooLarge (one line), not the pool's report: its advice, a larger create_cpu_device
    pool, makes no sense for a plan. `tensors` (keep each technique's tensors, for the
    viewer): by default with --timeline, unless a search plans many steps to keep one."""
    if tensors is None:
        tensors = bool(args.timeline) and not (args.find_depth or args.find_batch)
    step = f"a training step of {args.model} on input {format_shape((batch,) + sample)}"
    if args.width != 1:
        step += f" at --width {args.width:g}"
    try:
        return plan(
            _model(args, sample, depth),
            (batch,) + sample,
            recompute=args.recompute,
            offload=args.offload,
            budget=args.budget,
            dtype=np.dtype(args.dtype),
            tensors=tensors,
        )
    except OutOfMemory as e:
        raise StepTooLarge(
            f"{step} needs more than the planning device's {format_bytes(e.capacity)} of "
            "memory: the input, --width or --num-classes is too large; plan a smaller "
            "--input, --width, --num-classes or --batch-size",
            e.capacity,
        ) from None
    except ValueError as e:  # a layer refused the sample's shape
        if args.input is None:  # the default sample fits every model: not the user's input
            raise
        usual = format_shape(PAPER_SAMPLES.get(args.model, TRAIN_SAMPLE))
        raise UsageError(
            f"argument --input: {args.model} cannot take samples of shape {format_shape(sample)} "
            f"({e}); give another --input, e.g. {usual}"
        ) from None
    except OverflowError as e:
        raise StepTooLarge(
            f"{step} has sizes too large to count ({e}): the input, --width or --num-classes "
            "is too large; plan a smaller --input, --width, --num-classes or --batch-size"
        ) from None


def print_plan(step, budget):
    shape = format_shape(step.input_shape)
    print(
        f"{step.model}, input {shape}: {step.nodes} recorded operations; parameters, optimizer "
        f"state, inputs and results {format_bytes(step.persistent_bytes)}"
    )
    print(
        f"  {'technique':26} {'peak':>11} {'lower bound':>12} {'live at peak':>12}  "
        f"{'extra ops':>9} {'on host':>10}  peak at"
    )
    for t in step.techniques:
        fits = "" if budget is None else ("  fits" if t.fits(budget) else "  does not fit")
        host = format_bytes(t.host_bytes) if t.offload != "none" else "-"
        policy = f" ({t.offload})" if t.offload != "none" else ""
        print(
            f"  {t.technique + policy:26} {format_bytes(t.peak_bytes):>11} "
            f"{format_bytes(t.lower_bound_bytes):>12} {t.live_tensors_at_peak:>12}  "
            f"{t.recomputations:>9} {host:>10}  {t.peak_operation}{fits}"
        )
    if budget is not None and not any(t.fits(budget) for t in step.techniques):
        best = step.best()
        print(
            f"no technique fits {format_bytes(budget)}: the smallest peak reachable is "
            f"{format_bytes(best.peak_bytes)} ({best.technique}), set by {best.peak_operation}"
        )


def valid_depths(args, sample):
    """The ResNet depths up to MAX_SEARCH_DEPTH that build with these flags, in increasing
    order; the ResNet's own rules decide (6n + 2, 9n + 2, ...), without building a network.
    With the CIFAR stem and no --block, the basic-block depths (8, 14, 20, ...): mixed in, the
    bottleneck-only depths (11, 29, ...) need more memory than their basic neighbours, and
    the search needs memory that grows with the depth."""
    cifar = _stem(args, sample) == "cifar"
    rules = resnet.cifar_stages if cifar else resnet.imagenet_stages
    block = args.block or ("basic" if cifar else None)
    depths = []
    for depth in range(1, MAX_SEARCH_DEPTH + 1):
        try:
            rules(depth, block)
        except ValueError:
            continue
        depths.append(depth)
    return depths
