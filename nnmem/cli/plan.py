"""nnmem plan: how much memory a training step needs, before running it (shapes only).

For baseline (every block kept until the step ends), liveness, liveness + recomputation,
liveness + offload and all three (--offload picks the policy; none leaves them out) it
prints the peak, the lower bound, the count of tensors live at the peak, the operation where
the peak happens, the extra recomputed operations and the host memory offloading takes (the
table: plan_table.py); with --budget, which fit; with --find-depth / --find-batch, the
deepest ResNet or the largest batch that fits with any of the techniques, one line per probe
on stderr as it searches; with --timeline FILE.html, the memory viewer of the planned
techniques (a click on an operation lists the tensors live there), or with FILE.png their
plot. A step that takes more than a few seconds to plan says so on stderr (progress.py).

``nnmem plan MODEL.onnx`` plans an ONNX file's graph on its own input (onnx_model.py).
Without flags it plans the step that ``nnmem train`` runs without flags (flags.py: the CNN, a
batch of 64 of the shipped digits, 1x28x28); without --input and --batch-size, the step that
``nnmem train`` runs for the same --model.
"""

import functools

import numpy as np

from nnmem.cli import onnx_model
from nnmem.cli.arguments import (
    UsageError,
    byte_size,
    format_shape,
    link_gbps,
    png_path,
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
    DEFAULT_MODEL,
    PAPER_SAMPLES,
    check_depth_rules,
    check_memory_flags,
    check_offload_flags,
    depth_of,
    image_too_small,
    memory_flag,
)
from nnmem.cli.frontier import write_frontier
from nnmem.cli.plan_search import Plans, StepTooLarge, find_batch, find_depth
from nnmem.cli.plan_table import print_plan
from nnmem.cli.progress import Progress
from nnmem.cli.timeline import require_matplotlib, write_plan_timeline
from nnmem.graph.offload import POLICIES
from nnmem.memory import OutOfMemory, format_bytes
from nnmem.models import MODELS, create_model, resnet
from nnmem.planning import plan

#: One sample of nnmem train's default data, the digits (1x28x28).
TRAIN_SAMPLE = DATA_SAMPLES[DEFAULT_DATA]

#: --find-depth stops at ResNet-4000: beyond SuperNeurons' ResNet-2500, which offloading and
#: recomputation reach in a budget of a GPU's size; planning one takes about a minute, and the
#: search's cost grows with the depth it reaches.
MAX_SEARCH_DEPTH = 4000
#: --find-batch stops at 2**20 samples (planning costs the same at any batch size).
MAX_SEARCH_BATCH = 2**20


def add_parser(commands):
    p = commands.add_parser(
        "plan",
        help="plan a training step's memory on shapes alone",
        description="Plan a training step's memory on shapes alone, running nothing: for each "
        "technique (baseline, liveness, recomputation, offloading, all three) its peak, its "
        "lower bound and the operation at its peak; with --budget, which fit; with "
        "--find-depth or --find-batch, the deepest ResNet or the largest batch that fits. "
        "The model: one of the zoo's (--model) or an ONNX file's graph (MODEL.onnx).",
    )
    onnx_model.add_plan_arguments(p)
    p.add_argument(
        "--model",
        default=None,
        help=f"one of {', '.join(sorted(MODELS))} (default: {DEFAULT_MODEL}, as nnmem train)",
    )
    p.add_argument(
        "--depth", type=resnet_depth, default=None, help=f"ResNet depth (default {DEFAULT_DEPTH})"
    )
    p.add_argument(
        "--stem",
        default=None,
        choices=["cifar", "imagenet"],
        help="ResNet stem (default: imagenet for inputs of 64 pixels or more)",
    )
    p.add_argument(
        "--block",
        default=None,
        choices=["basic", "bottleneck"],
        help="ResNet block (default: the one the depth calls for; basic with the CIFAR stem)",
    )
    p.add_argument("--width", type=positive_float, default=1.0, help="channel multiplier")
    p.add_argument(
        "--num-classes",
        type=positive_int,
        default=None,
        help="classes of the last layer (default: the model's own: 1000 for alexnet and "
        "vgg16, 10 for the others)",
    )
    p.add_argument(
        "--batch-size",
        "--batch",
        type=positive_int,
        default=None,
        help=f"samples per batch (default {DEFAULT_BATCH}, as nnmem train; with an ONNX "
        "model, its graph's batch, or 1 where that is symbolic)",
    )
    p.add_argument(
        "--input",
        type=sample_shape,
        default=None,
        help="one sample's shape, e.g. 3x224x224 (default: what nnmem train feeds "
        "the model, 1x28x28; 3x227x227 for alexnet, 3x224x224 for vgg16; with an ONNX model, "
        "its graph's)",
    )
    p.add_argument(
        "--recompute",
        default="cost-aware",
        choices=["speed", "memory", "cost-aware"],
        help="the recomputation policy of the recompute rows: speed (each segment rebuilt "
        "once, the fewest recomputations), memory (rebuilt for each use, the smallest peak) or "
        "cost-aware (memory's peak with fewer recomputations)",
    )
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
        "--no-fuse",
        action="store_true",
        help="plan the step as the operators recorded it, without graph mode's fusion",
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
    memory_flag(p, "optimal adds its row to the table (with --budget)")
    p.add_argument(
        "--link-gbps",
        type=link_gbps,
        default=None,
        help="the copy link's speed (GB/s) that the optimal plan and --frontier assume for "
        "offloading (default: 12, a PCIe 3 x16 link)",
    )
    p.add_argument(
        "--frontier",
        type=png_path,
        metavar="FILE.png",
        default=None,
        help="draw the time/memory frontier: the optimal plan at budgets from the liveness "
        "peak down to the smallest that fits, with every heuristic as a point on the same "
        "axes (the data beside it as JSON), and print its table",
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
    path = onnx_model.onnx_path(args)
    if path is not None:
        onnx_model.check_zoo_flags(args, path, onnx_model.PLAN_ZOO_FLAGS)
    else:
        onnx_model.check_onnx_only_flags(args)
        args.model = args.model or DEFAULT_MODEL
        if args.model not in MODELS:
            raise UsageError(
                f"argument --model: unknown model {args.model!r}; choose one of "
                f"{', '.join(sorted(MODELS))}, or give an ONNX file (MODEL.onnx)"
            )
    if (args.find_depth or args.find_batch) and args.budget is None:
        raise UsageError(
            "--find-depth and --find-batch search against a memory budget: "
            "add --budget, e.g. --budget 12GiB"
        )
    check_offload_flags(args, default_offload="all", example_budget="12GiB")
    check_memory_flags(
        args,
        "12GiB",
        [
            ("--find-depth (it searches with the heuristics)", args.find_depth),
            ("--find-batch (it searches with the heuristics)", args.find_batch),
        ],
    )
    if args.frontier and (args.find_depth or args.find_batch):
        raise UsageError(
            "argument --frontier: it draws one step's frontier; leave out --find-depth and "
            "--find-batch"
        )
    require_matplotlib(args.timeline)
    require_matplotlib(args.frontier, "--frontier")
    check_flags_apply(args)
    if path is not None:  # the graph's own input, with the flags' sizes
        args.onnx_model = onnx_model.read(path, weights=False)
        args.model = args.onnx_model.name
        args.batch_size, sample = onnx_model.plan_input(args, args.onnx_model)
    else:
        sample = zoo_sample(args)
    plans = Plans(args, functools.partial(plan_step, args, sample))
    if args.find_depth:
        args.depth = find_depth(args, plans, valid_depths(args, sample))
        found = args.depth is not None
    elif args.find_batch:
        args.batch_size = find_batch(args, plans, range(1, MAX_SEARCH_BATCH + 1))
        found = args.batch_size is not None
    else:
        found = True
    if not found:
        # the search found nothing that fits: there is no plan to print or to view
        if args.timeline:
            print(f"  no memory viewer written to {args.timeline}: no step fits the budget")
        return 0
    step = plans.get(args.batch_size, args.depth)
    if isinstance(step, StepTooLarge):
        raise step
    print_plan(step, args.budget)
    if args.frontier:
        write_frontier(args, model_of(args, sample, args.depth), (args.batch_size,) + sample)
    if args.timeline:
        if step.techniques[0].timeline.tensors is None:  # a search's plan: planned again
            step = plans.with_tensors(args.batch_size, args.depth)
        with Progress("plan", f"writing {args.timeline}"):
            write_plan_timeline(args.timeline, step)
    return 0


def zoo_sample(args):
    """Check the zoo model's flags against each other; return one sample's shape."""
    if args.find_depth and args.model != "resnet":
        raise UsageError("argument --find-depth: it searches ResNet depths; use --model resnet")
    args.depth = depth_of(args)
    if args.batch_size is None:
        args.batch_size = DEFAULT_BATCH
    # Models whose pooling shrinks a 28x28 image to nothing (flags.SMALLEST_IMAGE: they cannot
    # train on the digits) are planned on the input of their papers (flags.PAPER_SAMPLES).
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
        check_depth_rules(lambda: model_of(args, sample, args.depth))
    return sample


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


def valid_depths(args, sample):
    """The ResNet depths up to MAX_SEARCH_DEPTH that build with these flags, in increasing
    order; the ResNet's own rules decide (6n + 2, 9n + 2, ...), without building a network.
    With the CIFAR stem and no --block, the basic-block depths (8, 14, 20, ...): mixed in, the
    bottleneck-only depths (11, 29, ...) need more memory than their basic neighbours, and
    the search needs memory that grows with the depth."""
    cifar = stem_of(args, sample) == "cifar"
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


def stem_of(args, sample):
    """A ResNet's stem: --stem, or imagenet for images of 64 pixels or more, else cifar."""
    return args.stem or ("imagenet" if len(sample) == 3 and min(sample[1:]) >= 64 else "cifar")


def model_of(args, sample, depth):
    """The model the flags describe (new, uninitialised), at `depth`, for samples `sample`."""
    if args.onnx_model is not None:
        return args.onnx_model.create()
    kwargs = dict(
        depth=depth,
        stem=stem_of(args, sample),
        block=args.block,
        width=args.width,
        num_channels=sample[0],
    )
    if args.num_classes:
        kwargs["num_classes"] = args.num_classes
    return create_model(args.model, **kwargs)


def plan_step(args, sample, batch, depth, tensors=None, progress=None):
    """plan() of the model the flags describe. A step that does not fit the planning device is
    a StepTooLarge (one line), not the pool's report: its advice, a larger create_cpu_device
    pool, makes no sense for a plan. `tensors` (keep each technique's tensors, for the
    viewer): by default with --timeline, unless a search plans many steps to keep one.
    `progress`: plan()'s, called as each stage starts."""
    if tensors is None:
        tensors = bool(args.timeline) and not (args.find_depth or args.find_batch)
    step = f"a training step of {args.model} on input {format_shape((batch,) + sample)}"
    if args.width != 1:
        step += f" at --width {args.width:g}"
    try:
        planned = plan(
            model_of(args, sample, depth),
            (batch,) + sample,
            recompute=args.recompute,
            offload=args.offload,
            budget=args.budget,
            dtype=np.dtype(args.dtype),
            tensors=tensors,
            progress=progress,
            memory=args.memory,
            link_gbps=args.link_gbps,
            fuse=not args.no_fuse,
        )
    except OutOfMemory as e:
        raise StepTooLarge(
            f"{step} needs more than the planning device's {format_bytes(e.capacity)} of "
            "memory: the input, --width or --num-classes is too large; plan a smaller "
            "--input, --width, --num-classes or --batch-size",
            e.capacity,
        ) from None
    except ValueError as e:  # a layer refused the sample's shape
        flag = "--image-size" if args.image_size else "--sequence" if args.sequence else None
        if args.onnx_model is not None and (flag or args.input):
            raise args.onnx_model.refused(flag or "--input", sample, e) from None
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
    # an ONNX graph's plan is named after its file (a zoo model's, after its class)
    return planned if args.onnx_model is None else planned._replace(model=args.model)
