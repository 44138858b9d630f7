"""nnmem train: train a zoo model on a data set and report, per epoch, the loss, the test
accuracy, images per second and the pool's peak memory.

This file holds the command's flags and its loop; what it builds from the flags is in
factories.py, the flags it shares with nnmem plan in flags.py, a run under mpiexec in
distributed.py, the notes of an out-of-memory error in hints.py, and --timeline in timeline.py.
"""

import itertools
import math
import time

import numba
import numpy as np
from tqdm import tqdm

from nnmem import tensor
from nnmem.cli import arguments, flags
from nnmem.cli.arguments import UsageError, format_shape
from nnmem.cli.distributed import check_dist_flags, create_dist_opt, dist_flags
from nnmem.cli.divergence import StateCopy, first_nonfinite_layer
from nnmem.cli.factories import create_device, make_model, make_optimizer
from nnmem.cli.hints import pool_hint, viewer_hint
from nnmem.cli.timeline import require_matplotlib, write_train_timeline
from nnmem.communicator import launched_with_mpi
from nnmem.data import iterate_batches, load, shard
from nnmem.graph import concurrency, offload
from nnmem.memory import OutOfMemory, format_bytes
from nnmem.models import MODELS


def add_parser(commands):
    p = commands.add_parser(
        "train", help="train a model (default: the SINGA CNN on the embedded digits)"
    )
    p.add_argument("--model", default="cnn", choices=sorted(MODELS))
    p.add_argument(
        "--depth",
        type=arguments.resnet_depth,
        default=None,
        help=f"ResNet depth (default {flags.DEFAULT_DEPTH}; CIFAR: 6n+2 or 9n+2)",
    )
    p.add_argument("--data", default=flags.DEFAULT_DATA, help="digits, mnist:DIR or cifar10:DIR")
    p.add_argument("--epochs", type=arguments.positive_int, default=10)
    p.add_argument(
        "--batch-size", "--batch", type=arguments.positive_int, default=flags.DEFAULT_BATCH
    )
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
        choices=sorted(concurrency.POLICIES),
        help="threads per operation, found by hill climbing in the first steps (graph mode, "
        "CPU): 1, 1-2, 1-3 (co-running operations), 1-4 (and hyper-threads), auto (= 1-4)",
    )
    p.add_argument("--seed", type=arguments.non_negative_int, default=0)
    dist_flags(p)
    p.add_argument(
        "--save-states",
        type=arguments.output_file,
        metavar="ZIP",
        default=None,
        help="after each epoch, write the model's states to this checkpoint (SINGA's format; "
        "under mpiexec, rank 0 writes it)",
    )
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


def offload_flags(p):
    """--offload, --budget and --sync-offload, as nnmem train takes them: nothing is offloaded
    unless --offload asks. nnmem plan declares its own three (its --offload defaults to all,
    and its help speaks of plans); flags.check_offload_flags checks both commands' values."""
    p.add_argument(
        "--offload",
        default="none",
        choices=list(offload.POLICIES),
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


def run(args):
    flags.check_offload_flags(args, default_offload="none", example_budget="512MiB")
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
    args.depth = flags.depth_of(args)
    if args.model == "resnet":  # the depth's own rules (6n + 2, ...), before any data is loaded
        flags.check_depth_rules(lambda: make_model(args, num_classes=10, num_channels=1))
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


def check_image_size(model, data, sample):
    """Refuse, before building anything, a model whose pooling would shrink the images of
    --data to nothing (AlexNet and VGG-16 on 28x28 digits), saying which --data fits it."""
    smallest = flags.image_too_small(model, sample)
    if smallest is None:
        return
    large_enough = [
        f"--data {name} ({format_shape(s)} images)"
        for name, s in flags.DATA_SAMPLES.items()
        if min(s[1:]) >= smallest
    ]
    if large_enough:
        fix = "use " + " or ".join(large_enough)
    else:
        loadable = ", ".join(f"{name} {format_shape(s)}" for name, s in flags.DATA_SAMPLES.items())
        fix = (
            f"none of the data sets --data loads is that large ({loadable}): train another "
            f"--model, or plan {model}'s memory with nnmem plan --model {model}"
        )
    raise UsageError(
        f"argument --model: {model} needs images of at least {smallest}x{smallest} (its paper "
        f"used {format_shape(flags.PAPER_SAMPLES[model])}), and {data} holds "
        f"{format_shape(sample)} ones; {fix}"
    )


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
            f"each), dist option {dist.dist_option}"
        )
    )
    if args.timeline and rank == 0:
        write_train_timeline(args, x_train[:batch], y_train[:batch], num_classes)
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
