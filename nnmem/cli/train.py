"""nnmem train: train a zoo model on a data set and report, per epoch, the loss, the test
accuracy, images per second and the pool's peak memory."""

import functools
import itertools
import math
import time

import numba
import numpy as np
from tqdm import tqdm

from nnmem import device, opt, tensor
from nnmem.cli import arguments
from nnmem.cli.arguments import UsageError
from nnmem.cli.divergence import StateCopy, first_nonfinite_layer
from nnmem.cli.timeline import require_matplotlib, write_timeline
from nnmem.communicator import DEFAULT_TIMEOUT_S, launched_with_mpi
from nnmem.data import iterate_batches, load, shard
from nnmem.dist_opt import EXCHANGES
from nnmem.graph.concurrency import MODES
from nnmem.graph.offload import POLICIES
from nnmem.measure import measure_lanes, measure_step
from nnmem.memory import OutOfMemory, format_bytes
from nnmem.memory.units import parse_bytes
from nnmem.models import MODELS, create_model
from nnmem.planning import smallest_pool

DEFAULT_DATA = "digits"
DEFAULT_BATCH = 64
#: One sample of each data set --data can load (nnmem.data.load).
DATA_SAMPLES = {"digits": (1, 28, 28), "mnist:DIR": (1, 28, 28), "cifar10:DIR": (3, 32, 32)}
#: Models whose pooling shrinks a small image to nothing: the smallest height and width they
#: take (AlexNet's shape arithmetic, VGG's five 2x2 pools), and the input of their papers.
SMALLEST_IMAGE = {"alexnet": 67, "vgg16": 32}
PAPER_SAMPLES = {"alexnet": (3, 227, 227), "vgg16": (3, 224, 224)}
#: The ResNet --depth when none is given: ResNet-20, the CIFAR paper's smallest.
DEFAULT_DEPTH = 20


def add_parser(commands):
    p = commands.add_parser(
        "train", help="train a model (default: the SINGA CNN on the embedded digits)"
    )
    p.add_argument("--model", default="cnn", choices=sorted(MODELS))
    p.add_argument(
        "--depth",
        type=arguments.resnet_depth,
        default=None,
        help=f"ResNet depth (default {DEFAULT_DEPTH}; CIFAR: 6n+2 or 9n+2)",
    )
    p.add_argument("--data", default=DEFAULT_DATA, help="digits, mnist:DIR or cifar10:DIR")
    p.add_argument("--epochs", type=arguments.positive_int, default=10)
    p.add_argument("--batch-size", "--batch", type=arguments.positive_int, default=DEFAULT_BATCH)
    p.add_argument("--lr", type=arguments.positive_float, default=0.02)
    p.add_argument("--momentum", type=arguments.momentum, default=0.9)
    p.add_argument("--weight-decay", type=arguments.non_negative_float, default=1e-5)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--pool",
        type=arguments.pool_size,
        default=None,
        help="pool size, e.g. 512MiB (default 2GiB; on a GPU, its free memory but 1GiB)",
    )
    p.add_argument("--no-graph", action="store_true", help="run every step eagerly")
    offload_flags(p)
    p.add_argument(
        "--link-gbps",
        type=arguments.link_gbps,
        default=None,
        help="with --device cpu: copies to and from host memory run at this many GB/s, as "
        "over a GPU's PCIe link (e.g. 8), to see what offloading costs without a GPU",
    )
    p.add_argument(
        "--concurrency",
        default="off",
        choices=sorted(MODES),
        help="threads per operation, found by hill climbing in the first steps (graph mode, "
        "CPU): 1, 1-2, 1-3 (co-running operations), 1-4 (and hyper-threads), auto (= 1-4)",
    )
    p.add_argument("--seed", type=arguments.non_negative_int, default=0)
    dist_flags(p)
    p.add_argument(
        "--max-batches",
        type=arguments.positive_int,
        default=None,
        help="stop each epoch after this many batches (quick runs)",
    )
    p.add_argument(
        "--timeline",
        type=arguments.timeline_path,
        metavar="FILE",
        default=None,
        help="before training, measure one step's memory (no recycling, eager, graph; with "
        "--offload, also its compute and copy lanes, sync and async): FILE.png plots it with "
        "the lower bound and writes the data beside it as JSON (same name, .json); "
        "FILE.html writes the memory viewer (one page, with the graph step recompiled with "
        "cost-aware recomputation too): click an operation to list the tensors live there",
    )
    p.set_defaults(run=run)


def dist_flags(p):
    """Data-parallel training, for a run started by mpiexec (see nnmem.dist_opt)."""
    p.add_argument(
        "--dist-option",
        default=None,
        choices=list(EXCHANGES),
        help="under mpiexec: how the ranks exchange gradients, plain (float32), half (float16 "
        "on the wire), sparseTopK or sparseThreshold (with --spars); default plain",
    )
    p.add_argument(
        "--spars",
        type=arguments.positive_float,
        default=None,
        help="with --dist-option sparseTopK: the fraction of each gradient sent (default "
        "0.05); sparseThreshold: the smallest magnitude sent",
    )
    p.add_argument(
        "--dist-timeout",
        type=arguments.positive_float,
        default=None,
        help="under mpiexec: seconds a rank waits for the others in one exchange before the "
        f"job stops with an error (default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--save-states",
        type=arguments.output_file,
        metavar="ZIP",
        default=None,
        help="after each epoch, write the model's states to this checkpoint (SINGA's format; "
        "under mpiexec, rank 0 writes it)",
    )


def check_dist_flags(args, world_size):
    """One-line errors for distributed flags that cannot apply."""
    given = [
        f
        for f, v in (
            ("--dist-option", args.dist_option),
            ("--spars", args.spars),
            ("--dist-timeout", args.dist_timeout),
        )
        if v is not None
    ]
    if given and world_size == 1:
        raise UsageError(
            f"argument {given[0]}: it sets how the processes of a data-parallel run exchange "
            "gradients, and this run is one process; launch it with mpiexec -n 2 nnmem train ..."
        )
    if args.spars is not None and args.dist_option not in ("sparseTopK", "sparseThreshold"):
        raise UsageError(
            "argument --spars: it sets the sparsification; add --dist-option sparseTopK or "
            "sparseThreshold"
        )
    if args.dist_option == "sparseTopK" and args.spars is not None and args.spars > 1:
        raise UsageError(
            "argument --spars: with sparseTopK it is the fraction sent, in (0, 1]; got "
            f"{args.spars:g}"
        )


def offload_flags(p):
    """--offload, --budget and --sync-offload (nnmem train and nnmem plan)."""
    p.add_argument(
        "--offload",
        default="none",
        choices=list(POLICIES),
        help="move activations to host memory between forward and backward: conv (CONV "
        "layers' inputs), all, or dyn (the fastest that fits --budget); see vDNN",
    )
    p.add_argument(
        "--budget",
        type=arguments.byte_size,
        default=None,
        help="the most memory the pool may use, e.g. 512MiB",
    )
    p.add_argument(
        "--sync-offload",
        action="store_true",
        help="synchronise compute and copies at every layer's end (vDNN) instead of the "
        "asynchronous engine (vDNNExt)",
    )


def check_offload_flags(args):
    """One-line errors for offload flags that cannot work together."""
    if args.offload == "dyn" and args.budget is None:
        raise UsageError(
            "argument --offload: dyn picks the fastest policy that fits a budget; add "
            "--budget, e.g. --budget 512MiB"
        )
    if args.sync_offload and args.offload == "none":
        raise UsageError(
            "argument --sync-offload: there is nothing to synchronise without offloading; add "
            "--offload conv, all or dyn"
        )


def run(args):
    check_offload_flags(args)
    if args.link_gbps is not None and args.device != "cpu":
        raise UsageError(
            "argument --link-gbps: it slows the CPU's copies to a GPU link's speed; a GPU has "
            "its own link: leave it out with --device cuda"
        )
    if args.concurrency != "off":
        for flag, wrong, why in (
            ("--no-graph", args.no_graph, "it controls a recorded step's threads"),
            ("--device cuda", args.device != "cpu", "thread counts are for the CPU"),
            ("--offload", args.offload != "none", "the two cannot be combined yet"),
        ):
            if wrong:
                raise UsageError(f"argument --concurrency: leave out {flag}: {why}")
    require_matplotlib(args.timeline)
    args.depth = depth_of(args)
    if args.model == "resnet":
        try:  # the depth's own rules (6n + 2, ...), before any data is loaded
            make_model(args, num_classes=10, num_channels=1)
        except ValueError as e:
            raise UsageError(f"argument --depth: {e}") from None
    world_size = launched_with_mpi()
    check_dist_flags(args, world_size)
    x_train, y_train, x_test, y_test = load(args.data)
    check_image_size(args.model, args.data, x_train.shape[1:])
    if args.batch_size > len(x_train):
        raise UsageError(
            f"argument --batch-size/--batch: {args.batch_size} is more than the "
            f"{len(x_train)} training images of {args.data}; use at most "
            f"{len(x_train)}"
        )
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    dist = None if world_size == 1 else create_dist_opt(args)
    if dist is not None:
        x_train, y_train = shard((x_train, y_train), dist.global_rank, dist.world_size)
        if args.batch_size > len(x_train):
            raise UsageError(
                f"argument --batch-size/--batch: {args.batch_size} is more than the "
                f"{len(x_train)} training images of each of the {dist.world_size} ranks; use "
                f"at most {len(x_train)} (the batch is per rank)"
            )
    dev = create_device(args, dist)
    try:
        # A run that overflows is stopped by train() with the step and the layer; NumPy's
        # overflow warnings, printed before that, would only bury the explanation.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            train(args, dev, (x_train, y_train, x_test, y_test), num_classes, dist)
    except OutOfMemory as e:
        e.add_note(pool_hint(args, x_train.shape[1:], num_classes))
        e.add_note(viewer_hint(args, x_train.shape[1:], num_classes))
        raise
    return 0


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


def check_image_size(model, data, sample):
    """Refuse, before building anything, a model whose pooling would shrink the images of
    --data to nothing (AlexNet and VGG-16 on 28x28 digits), saying which --data fits it."""
    smallest = SMALLEST_IMAGE.get(model)
    if smallest is None or len(sample) != 3 or min(sample[1:]) >= smallest:
        return
    large_enough = [
        f"--data {name} ({_shape(s)} images)"
        for name, s in DATA_SAMPLES.items()
        if min(s[1:]) >= smallest
    ]
    if large_enough:
        fix = "use " + " or ".join(large_enough)
    else:
        loadable = ", ".join(f"{name} {_shape(s)}" for name, s in DATA_SAMPLES.items())
        fix = (
            f"none of the data sets --data loads is that large ({loadable}): train another "
            f"--model, or plan {model}'s memory with nnmem plan --model {model}"
        )
    raise UsageError(
        f"argument --model: {model} needs images of at least {smallest}x{smallest} (its paper "
        f"used {_shape(PAPER_SAMPLES[model])}), and {data} holds {_shape(sample)} ones; {fix}"
    )


def _shape(shape):
    return "x".join(map(str, shape))


def create_device(args, dist=None):
    """The device --device names; one this machine cannot provide is a usage error. Under
    mpiexec (dist), the ranks of a node take its GPUs in turn (by local rank)."""
    if args.device == "cpu":
        try:
            dev = device.create_cpu_device(args.pool, link_gbps=args.link_gbps)
        except (MemoryError, ValueError) as e:  # NumPy cannot allocate (or index) that much
            if args.pool is None:  # the default pool (NNMEM_POOL_BYTES): not the flag's fault
                raise
            raise UsageError(
                f"argument --pool: cannot allocate {format_bytes(args.pool)} on this machine "
                f"({type(e).__name__}: {e}); give a smaller --pool, e.g. 2GiB"
            ) from None
    else:
        try:
            gpu = 0 if dist is None else dist.local_rank % max(device.get_num_gpus(), 1)
            dev = device.create_cuda_gpu_on(gpu, args.pool)
        except device.DeviceUnavailable as e:
            raise UsageError(
                f"argument --device: cuda is not available ({e}); use --device cpu"
            ) from None
    if args.budget is not None and args.budget > dev.pool.capacity:
        raise UsageError(
            f"argument --budget: {format_bytes(args.budget)} is more than the pool "
            f"({format_bytes(dev.pool.capacity)}); give a smaller --budget or a larger --pool"
        )
    return dev


def make_model(args, num_classes, num_channels):
    """The model the flags describe (new, uninitialised)."""
    return create_model(
        args.model, num_classes=num_classes, num_channels=num_channels, depth=args.depth
    )


def make_optimizer(args):
    return opt.SGD(lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)


def create_dist_opt(args):
    """The DistOpt of a run mpiexec started: each rank trains on its shard of the data with
    the batch --batch-size, on its share of the node's cores, and only rank 0 prints."""
    try:
        dist = opt.DistOpt(
            make_optimizer(args),
            exchange=args.dist_option or "plain",
            spars=0.05 if args.spars is None else args.spars,
            timeout=DEFAULT_TIMEOUT_S if args.dist_timeout is None else args.dist_timeout,
        )
    except ImportError as e:
        raise UsageError(f"mpiexec started this run, but {e}") from None
    # N ranks on one node, each with every core, would run N times too many threads.
    numba.set_num_threads(max(1, numba.config.NUMBA_NUM_THREADS // dist.communicator.local_size))
    return dist


def train(args, dev, data, num_classes, dist=None):
    """Compile the model, then train it epoch by epoch, printing one line per epoch (with
    `dist`, a DistOpt: on this rank's shard, and on rank 0 only the printing and the
    checkpoints)."""
    x_train, y_train, x_test, y_test = data
    rank, world_size = (0, 1) if dist is None else (dist.global_rank, dist.world_size)
    say = print if rank == 0 else _quiet
    dev.SetRandSeed(args.seed)
    model = make_model(args, num_classes, x_train.shape[1])
    model.set_optimizer(make_optimizer(args) if dist is None else dist)
    batch = args.batch_size
    tx = tensor.PlaceHolder((batch,) + x_train.shape[1:], dev)
    ty = tensor.PlaceHolder((batch,), dev, tensor.int32)
    model.compile(
        [tx],
        is_train=True,
        use_graph=not args.no_graph,
        sequential=False,
        offload=args.offload,
        budget=args.budget,
        async_offload=not args.sync_offload,
        concurrency=args.concurrency,
    )
    say(
        f"{args.model} on {args.data}: {len(x_train) * world_size} training / {len(x_test)} test "
        f"images {x_train.shape[1:]}, {sum(p.size() for p in model.get_params().values()):,} "
        f"parameters, batch {batch}, pool {format_bytes(dev.pool.capacity)}"
        + ("" if args.budget is None else f", budget {format_bytes(args.budget)}")
        + ("" if args.offload == "none" else f", offload {args.offload}")
        + (
            ""
            if dist is None
            else f", {world_size} ranks (batch {batch} and {numba.get_num_threads()} thread(s) "
            f"each), exchange {dist.exchange}"
        )
    )
    if args.timeline and rank == 0:
        plot_step_timelines(args, x_train[:batch], y_train[:batch], num_classes)
    steps = len(x_train) // batch
    if args.max_batches is not None:
        steps = min(steps, args.max_batches)
    before_step = StateCopy(model)
    for epoch in range(args.epochs):
        dev.reset_peak_memory_stats()
        start, sent = time.perf_counter(), 0 if dist is None else dist.wire_bytes
        losses = train_epoch(args, model, tx, ty, before_step, x_train, y_train, epoch, steps)
        seconds = time.perf_counter() - start
        peak = dev.memory_stats()["allocated_bytes.peak"]
        # Every rank evaluates (the same parameters: the same accuracy), so that none waits in
        # the next step's exchange, against its timeout, while rank 0 alone evaluates.
        accuracy = evaluate(model, tx, x_test, y_test)
        if rank != 0:
            continue
        print(
            f"epoch {epoch + 1}: loss {np.mean(losses):.4f}  test accuracy {accuracy:.4f}  "
            f"{steps * batch * world_size / seconds:.0f} images/s  peak pool memory "
            f"{format_bytes(peak)}"
            + offload_summary(dev.memory_stats())
            + (
                ""
                if dist is None
                else f"  sent {format_bytes((dist.wire_bytes - sent) // steps)}/step"
            )
        )
        if args.save_states:
            model.save_states(args.save_states)
            print(f"  states written to {args.save_states}")


def _quiet(*args, **kwargs):
    """print, on the ranks that do not print (all but rank 0)."""


def offload_summary(stats):
    """What the last step moved to the host and back: the graph engine's figures, or the
    eager tensor cache's (nothing when nothing was offloaded)."""
    if "offload.bytes_to_host" in stats:
        return (
            f"  offloaded {format_bytes(stats['offload.bytes_to_host'])}/step, transfers "
            f"{1e3 * stats['offload.transfer_seconds']:.1f} ms, stalls "
            f"{1e3 * stats['offload.stall_seconds']:.1f} ms"
        )
    if "cache.misses" in stats:
        return (
            f"  tensor cache: {stats['cache.hits']} hits, {stats['cache.misses']} misses, "
            f"{format_bytes(stats['cache.bytes_to_host'])} out/step"
        )
    return ""


def train_epoch(args, model, tx, ty, before_step, x_train, y_train, epoch, steps):
    """Train on `steps` shuffled batches, copied into tx and ty; return their losses. A loss
    that is NaN or Inf stops the run (see diverged)."""
    model.train()
    batches = iterate_batches(
        x_train, y_train, args.batch_size, seed=args.seed, drop_last=True, epoch=epoch
    )
    losses = []
    # disable=None: a bar on a terminal only, none in a log file or a captured stream.
    with tqdm(
        total=steps,
        desc=f"epoch {epoch + 1}/{args.epochs}",
        unit="batch",
        leave=False,
        disable=None if launched_with_mpi() == 1 else True,  # ranks would draw over each other
    ) as bar:
        for step, (x, y) in enumerate(itertools.islice(batches, steps)):
            tx.copy_from_numpy(x)
            ty.copy_from_numpy(y)
            before_step.save()
            _, loss = model(tx, ty)
            losses.append(float(tensor.to_numpy(loss)[0]))
            if not math.isfinite(losses[-1]):
                raise diverged(args, model, before_step, tx, x, losses[-1], epoch, step)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
            bar.update()
    return losses


def diverged(args, model, before_step, tx, x, loss, epoch, step):
    """The error that stops a run whose loss is NaN or Inf: the step, the first layer whose
    output was not finite, and what to change. The model's states are put back as they were
    before that step (its update wrote NaN into them), to find the layer and to stay so."""
    where = f"the loss is {loss} at epoch {epoch + 1}, batch {step + 1}"
    before_step.restore()
    if not np.isfinite(x).all():
        return FloatingPointError(
            f"{where}: the input batch itself holds NaN or Inf values; "
            f"check the data set ({args.data})"
        )
    try:
        layer = first_nonfinite_layer(model, tx)
    except OutOfMemory:
        layer = "unknown (the pool has no room to run the forward pass again)"
    finally:
        before_step.restore()  # the pass moved BatchNorm's running statistics
    culprit = (
        f"the first layer whose output is not finite is {layer}"
        if layer
        else "every layer's output is finite, the loss itself is not"
    )
    return FloatingPointError(
        f"{where}, and {culprit}: the run diverged; lower --lr (now {args.lr:g})"
    )


def pool_hint(args, sample, num_classes):
    """The note an out-of-memory error gets on the command line: a pool this run fits in, as a
    --pool value (or a --budget), measured on a planning device (every allocation, no kernel).
    With --offload in graph mode, the pool of that policy ("dyn" had tried them all: "all",
    the smallest)."""
    offload = {"none": "none", "conv": "conv"}.get(args.offload, "all")
    offloading = offload != "none" and not args.no_graph
    needed = smallest_pool(
        make_model(args, num_classes, sample[0]),
        (args.batch_size,) + sample,
        use_graph=not args.no_graph,
        optimizer=make_optimizer(args),
        plans_for=args.device,
        offload=offload,
    )
    mib = math.ceil(needed / 2**20)
    if args.budget is not None:
        if args.offload != "none" and args.no_graph:
            return (
                f"nnmem train: eagerly, {args.model} at batch {args.batch_size} needs "
                f"{format_bytes(needed)} ({needed} bytes) with nothing moved to the host; "
                f"below that the tensor cache moves tensors out, and --budget was too small even "
                f"so: rerun with a larger --budget (at most {mib}MiB), or a smaller --batch-size"
            )
        if offloading:
            return (
                f"nnmem train: with --offload {offload}, {args.model} at batch "
                f"{args.batch_size} needs {format_bytes(needed)} ({needed} bytes): rerun with "
                f"--budget {mib}MiB, or with a smaller --batch-size"
            )
        return (
            f"nnmem train: without offloading, {args.model} at batch {args.batch_size} needs "
            f"{format_bytes(needed)} ({needed} bytes): rerun with --budget {mib}MiB, with "
            "--offload all, or with a smaller --batch-size"
        )
    return (
        f"nnmem train: {args.model} at batch {args.batch_size} fits in a pool of "
        f"{format_bytes(needed)} ({needed} bytes): rerun with --pool {mib}MiB, or with a "
        "smaller --batch-size"
    )


def viewer_hint(args, sample, num_classes):
    """The note that says how to see the tensors live at this step's peak: the memory viewer
    of the same step, planned (nnmem plan runs nothing, so it cannot run out of memory)."""
    depth = f" --depth {args.depth}" if args.model == "resnet" else ""
    classes = "" if num_classes == 10 else f" --num-classes {num_classes}"
    return (
        f"nnmem train: to see which tensors are live at the peak and where the plan puts them, "
        f"write the memory viewer and open it in a browser: nnmem plan --model {args.model}"
        f"{depth}{classes} --batch {args.batch_size} --input {_shape(sample)} "
        "--timeline oom.html"
    )


def measurement_pool(args):
    """The pool of the throwaway devices --timeline measures on: --pool caps training, but the
    step measured with no recycling needs more than a pool that fits training (the CNN at batch
    64: 52.7 MiB against 19.8), so they get at least the default pool (2 GiB)."""
    return None if args.pool is None else max(device.default_pool_bytes(), parse_bytes(args.pool))


def plot_step_timelines(args, x, y, num_classes):
    """Measure one step three ways on throwaway copies of the model (with offloading, its
    lanes too), and write --timeline: a plot, or the memory viewer (which adds the graph step
    compiled with cost-aware recomputation)."""
    pool = measurement_pool(args)
    timelines, summary = measure_step(
        functools.partial(make_model, args, num_classes, x.shape[1]),
        x,
        y,
        pool,
        args.seed,
        recompute="cost-aware" if arguments.is_html(args.timeline) else None,
    )
    width = max(len(t.label) for t in timelines.values())
    for t in timelines.values():
        position, name = t.peak_step()
        print(f"  {t.label:{width}} peak {format_bytes(t.peak):>10} at step {position} ({name})")
    print(
        f"  static plan: arena {format_bytes(summary['arena_bytes'])}, lower bound "
        f"{format_bytes(summary['lower_bound_bytes'])}"
    )
    bound = summary["persistent_bytes"] + summary["lower_bound_bytes"]
    lanes = {}
    if args.offload not in ("none", "dyn") and not args.no_graph:
        lanes, offloaded = measure_lanes(
            functools.partial(make_model, args, num_classes, x.shape[1]),
            x,
            y,
            args.offload,
            pool,
            args.seed,
            args.link_gbps,
        )
        timelines["offload"] = offloaded
        print(f"  {offloaded.label}: peak {format_bytes(offloaded.peak)}")
        for label, step_lanes in lanes.items():
            copying = sum(end - start for lane, _, start, end in step_lanes if lane == "copy")
            length = max((end for *_, end in step_lanes), default=0.0)
            print(f"  {label}: step {1e3 * length:.1f} ms, copies {1e3 * copying:.1f} ms")
    write_timeline(
        args.timeline,
        list(timelines.values()),
        f"{args.model}, batch {len(x)}: memory during one training step",
        lower_bound=bound,
        lanes=lanes,
        data={"plan": summary},
        selected=timelines["graph"].label,
    )


def evaluate(model, tx, x, y):
    """Accuracy in inference mode (BatchNorm uses running statistics, no dropout), batch by
    batch through the training input tensor `tx`: one shape, so graph mode records a single
    inference graph and no batch tensor is allocated. The last, partial batch is padded with
    zeros and the padding's predictions are dropped."""
    model.eval()
    batch = tx.shape[0]
    correct = 0
    for start in range(0, len(y), batch):
        xb, yb = x[start : start + batch], y[start : start + batch]
        tx.copy_from_numpy(_pad(xb, batch))
        logits = tensor.to_numpy(model(tx))[: len(yb)]
        correct += int((logits.argmax(axis=1) == yb).sum())
    return correct / len(y)


def _pad(xb, batch):
    """xb with zero samples appended up to `batch` samples."""
    if len(xb) == batch:
        return xb
    padding = np.zeros((batch - len(xb),) + xb.shape[1:], xb.dtype)
    return np.concatenate([xb, padding])
