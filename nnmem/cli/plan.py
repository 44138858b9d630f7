"""nnmem plan: how much memory a training step needs, before running it (shapes only).

For baseline (every block kept until the step ends), liveness, and liveness + recomputation
it prints the peak, the lower bound, the live tensors at the peak, the operation where the
peak happens and the extra recomputed operations; with --budget, which fit; with
--find-depth / --find-batch, the deepest ResNet or the largest batch that fits.
"""
from nnmem.memory import format_bytes, parse_bytes
from nnmem.models import MODELS, create_model
from nnmem.planning import plan


def add_parser(commands):
    p = commands.add_parser("plan", help="plan a training step's memory on shapes alone")
    p.add_argument("--model", default="resnet", help=f"one of {', '.join(sorted(MODELS))}")
    p.add_argument("--depth", type=int, default=20, help="ResNet depth")
    p.add_argument("--stem", default=None, choices=["cifar", "imagenet"],
                   help="ResNet stem (default: imagenet for inputs of 64 pixels or more)")
    p.add_argument("--block", default=None, choices=["basic", "bottleneck"])
    p.add_argument("--width", type=float, default=1.0, help="channel multiplier")
    p.add_argument("--num-classes", type=int, default=None)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--input", default="3x32x32", help="one sample's shape, e.g. 3x224x224")
    p.add_argument("--recompute", default="cost-aware",
                   choices=["speed", "memory", "cost-aware"])
    p.add_argument("--budget", default=None, help="memory available, e.g. 12GiB, 512MiB, bytes")
    search = p.add_mutually_exclusive_group()
    search.add_argument("--find-depth", action="store_true",
                        help="the deepest ResNet that fits the budget")
    search.add_argument("--find-batch", action="store_true",
                        help="the largest batch that fits the budget")
    p.set_defaults(run=run)


def parse_shape(text):
    """(3, 224, 224) from "3x224x224"."""
    try:
        shape = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) <= 0:
        raise ValueError(f"--input {text!r}: write one sample's shape as sizes joined by x, "
                         "e.g. 3x224x224 or 784")
    return shape


def run(args):
    sample = parse_shape(args.input)
    budget = parse_bytes(args.budget) if args.budget is not None else None
    if (args.find_depth or args.find_batch) and budget is None:
        raise ValueError("--find-depth and --find-batch search against a memory budget: "
                         "add --budget, e.g. --budget 12GiB")
    if args.find_depth and args.model != "resnet":
        raise ValueError("--find-depth searches ResNet depths: use --model resnet")
    if args.model not in MODELS:
        raise ValueError(f"unknown model {args.model!r}; choose one of {sorted(MODELS)}")
    if args.find_depth:
        depth = find_largest(lambda d: _fits(args, sample, args.batch, d, budget),
                             valid_depths(args, sample), "depth")
        print(f"deepest ResNet that fits {format_bytes(budget)}: "
              f"{'none' if depth is None else depth}")
        if depth is None:
            return 0
        args.depth = depth
    elif args.find_batch:
        batch = find_largest(lambda b: _fits(args, sample, b, args.depth, budget),
                             _counting(), "batch")
        print(f"largest batch that fits {format_bytes(budget)}: "
              f"{'none' if batch is None else batch}")
        if batch is None:
            return 0
        args.batch = batch
    print_plan(_plan(args, sample, args.batch, args.depth), budget)
    return 0


def _model(args, sample, depth):
    stem = args.stem or ("imagenet" if len(sample) == 3 and min(sample[1:]) >= 64 else "cifar")
    kwargs = dict(depth=depth, stem=stem, block=args.block, width=args.width,
                  num_channels=sample[0])
    if args.num_classes:
        kwargs["num_classes"] = args.num_classes
    return create_model(args.model, **kwargs)


def _plan(args, sample, batch, depth):
    return plan(_model(args, sample, depth), (batch,) + sample, recompute=args.recompute)


def _fits(args, sample, batch, depth, budget):
    return _plan(args, sample, batch, depth).best().fits(budget)


def print_plan(step, budget):
    shape = "x".join(map(str, step.input_shape))
    print(f"{step.model}, input {shape}: {step.nodes} recorded operations; parameters, optimizer "
          f"state, inputs and results {format_bytes(step.persistent_bytes)}")
    print(f"  {'technique':22} {'peak':>11} {'lower bound':>12} {'live at peak':>12}  "
          f"{'extra ops':>9}  peak at")
    for t in step.techniques:
        fits = "" if budget is None else ("  fits" if t.fits(budget) else "  does not fit")
        print(f"  {t.technique:22} {format_bytes(t.peak_bytes):>11} "
              f"{format_bytes(t.lower_bound_bytes):>12} {t.live_tensors_at_peak:>12}  "
              f"{t.recomputations:>9}  {t.peak_operation}{fits}")
    if budget is not None and not any(t.fits(budget) for t in step.techniques):
        best = step.best()
        print(f"no technique fits {format_bytes(budget)}: the smallest peak reachable is "
              f"{format_bytes(best.peak_bytes)} ({best.technique}), set by {best.peak_operation}")


def valid_depths(args, sample):
    """ResNet depths that build, in increasing order (8, 10, ... skipping invalid ones)."""
    depth = 8
    while True:
        try:
            _model(args, sample, depth)
            yield depth
        except ValueError:
            pass
        depth += 1


def _counting():
    n = 1
    while True:
        yield n
        n += 1


def find_largest(fits, candidates, what):
    """The largest candidate for which fits() holds, assuming it holds for a prefix: grow the
    index exponentially until it fails, then bisect between the last success and the failure."""
    values = []

    def value(i):
        while len(values) <= i:
            values.append(next(candidates))
        return values[i]
    if not fits(value(0)):
        return None
    good, step = 0, 1
    while fits(value(good + step)):
        good, step = good + step, step * 2
        if good > 100_000:
            raise ValueError(f"--find-{what}: still fits at {value(good)}; the budget is no limit")
    bad = good + step
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(value(middle)):
            good = middle
        else:
            bad = middle
    return value(good)
