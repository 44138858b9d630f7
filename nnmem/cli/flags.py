"""What nnmem train and nnmem plan share about their flags: the step train runs when a flag is
left out (its model, data, batch and ResNet depth: nnmem plan plans that step), which models
need images larger than the data holds, and the checks both commands make once they run
(arguments.py checks each value as it is parsed; these check flags against each other, and
against the model), and the memory flags as each command declares them (--memory; nnmem
train's --offload, --budget and --sync-offload).

Each check raises a UsageError, which the command line prints on one line, before any data
is loaded or any step is built.
"""

from nnmem.cli.arguments import UsageError, byte_size
from nnmem.graph import offload
from nnmem.step_options import MEMORY

#: The model both commands take without --model: SINGA's CNN, which trains on the digits.
DEFAULT_MODEL = "cnn"
#: The data nnmem train loads without --data, and one sample of each data set --data can load
#: (nnmem.data.load): nnmem plan plans the step that nnmem train runs.
DEFAULT_DATA = "digits"
DATA_SAMPLES = {"digits": (1, 28, 28), "mnist:DIR": (1, 28, 28), "cifar10:DIR": (3, 32, 32)}
DEFAULT_BATCH = 64
#: The ResNet --depth when none is given: ResNet-20, the CIFAR paper's smallest.
DEFAULT_DEPTH = 20
#: Models whose pooling shrinks a small image to nothing: the smallest height and width they
#: take (AlexNet's shape arithmetic, VGG's five 2x2 pools), and the input of their papers.
SMALLEST_IMAGE = {"alexnet": 67, "vgg16": 32}
PAPER_SAMPLES = {"alexnet": (3, 227, 227), "vgg16": (3, 224, 224)}


def depth_of(args):
    """The depth the flags give a ResNet (--depth, or DEFAULT_DEPTH), None for another model;
    a --depth for another model, which would ignore it, is refused."""
    if args.model != "resnet":
        if args.depth is not None:
            raise UsageError(
                f"argument --depth: it sets a ResNet's depth, and --model {args.model} has no "
                "depth to set; leave it out, or use --model resnet"
            )
        return None
    return DEFAULT_DEPTH if args.depth is None else args.depth


def check_depth_rules(build):
    """A ResNet's depth follows the model's own rules (6n + 2, ...): `build()` builds the
    model the flags describe, and the ValueError it raises for another depth is refused."""
    try:
        build()
    except ValueError as e:
        raise UsageError(f"argument --depth: {e}") from None


def image_too_small(model, sample):
    """The smallest height and width `model` takes (SMALLEST_IMAGE) if the images of `sample`
    (one sample's shape, C x H x W) are smaller; None if they are large enough."""
    smallest = SMALLEST_IMAGE.get(model)
    if smallest is None or len(sample) != 3 or min(sample[1:]) >= smallest:
        return None
    return smallest


def memory_flag(p, what):
    """--memory, as nnmem train and nnmem plan take it (`what`: the help's end)."""
    p.add_argument(
        "--memory",
        default="heuristic",
        choices=list(MEMORY),
        help="who decides what each tensor does: heuristic (the --recompute and --offload "
        "policies) or optimal (keep, recompute or offload per tensor, the fastest plan "
        f"within --budget, by a MILP solver): {what}",
    )


def check_memory_flags(args, example_budget, policies_asked):
    """--memory optimal needs a budget; `policies_asked`: the flags that would set policies
    the optimal plan decides itself (nnmem train's --recompute and --offload; nnmem plan has
    none: its rows show the heuristics beside the optimal one)."""
    if args.memory != "optimal":
        return
    if args.budget is None:
        raise UsageError(
            "argument --memory: optimal finds the fastest plan within a budget; add --budget, "
            f"e.g. --budget {example_budget}"
        )
    for flag, asked in policies_asked:
        if asked:
            raise UsageError(
                f"argument --memory: optimal decides recomputation and offloading per tensor "
                f"itself; leave out {flag} (or use --memory heuristic)"
            )


def check_offload_flags(args, default_offload, example_budget):
    """--offload, --budget and --sync-offload that cannot work together: dyn picks the
    fastest policy that fits a budget, and --sync-offload synchronises an offload's copies.
    `default_offload` is the command's --offload when it is left out (train: none, plan:
    all), `example_budget` the --budget its error suggests."""
    if args.offload == "dyn" and args.budget is None:
        raise UsageError(
            "argument --offload: dyn picks the fastest policy that fits a budget; add "
            f"--budget, e.g. --budget {example_budget}"
        )
    if args.sync_offload and args.offload == "none":
        if default_offload == "none":  # --offload was left out
            raise UsageError(
                "argument --sync-offload: there is nothing to synchronise without offloading; "
                "add --offload conv, all or dyn"
            )
        raise UsageError(
            "argument --sync-offload: it is about offloading; leave it out with --offload none"
        )


def offload_flags(p):
    """--offload, --budget and --sync-offload, as nnmem train takes them: nothing is offloaded
    unless --offload asks. nnmem plan declares its own three (its --offload defaults to all,
    and its help speaks of plans); check_offload_flags checks both commands' values."""
    p.add_argument(
        "--offload",
        default="none",
        choices=list(offload.POLICIES),
        help="move activations to host memory between forward and backward: conv (CONV "
        "layers' inputs), all, or dyn (the fastest that fits --budget); see vDNN",
    )
    p.add_argument(
        "--budget",
        type=byte_size,
        default=None,
        help="the most memory the pool may use, e.g. 512MiB",
    )
    p.add_argument(
        "--sync-offload",
        action="store_true",
        help="synchronise compute and copies at every layer's end (vDNN) instead of the "
        "asynchronous engine (vDNNExt)",
    )
    memory_flag(p, "optimal prints what it decided after the first epoch")
