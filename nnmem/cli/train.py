"""nnmem train: train a zoo model (or an ONNX file's, --onnx) on a data set and report, per
epoch, the loss, the test accuracy, images per second and the pool's peak memory.

This file holds the command's flags and its loop; what it builds from the flags is in
factories.py, the flags it shares with nnmem plan (and its offloading flags) in flags.py, an
ONNX file's checks in onnx_model.py, a run under mpiexec in distributed.py, the notes of an
out-of-memory error in hints.py, --timeline in timeline.py, --save-states and --resume in
resume.py, and what it says besides its epoch lines (kernels compiling, the speed,
--concurrency's choice, what offloading moved, the closing summary) in train_report.py.
"""

import itertools
import math
import os
import time

import numba
import numpy as np
from tqdm import tqdm

from nnmem import tensor
from nnmem.cli import arguments, flags, onnx_model
from nnmem.cli.arguments import UsageError
from nnmem.cli.distributed import check_dist_flags, create_dist_opt, dist_flags
from nnmem.cli.divergence import StateCopy, diverged
from nnmem.cli.factories import (
    TRAINABLE,
    check_image_size,
    create_device,
    make_model,
    make_optimizer,
    trainable_model,
)
from nnmem.cli.hints import pool_hint, viewer_hint
from nnmem.cli.resume import Saver, resumed
from nnmem.cli.timeline import require_matplotlib, write_train_timeline
from nnmem.cli.train_report import TrainReport, offload_summary, optimal_summary, summary_line
from nnmem.communicator import launched_with_mpi
from nnmem.data import iterate_batches, load, shard
from nnmem.graph import concurrency, recompute
from nnmem.memory import OutOfMemory, format_bytes
from nnmem.models import MODELS


def add_parser(commands):
    untrainable = sorted(set(MODELS) - set(TRAINABLE))
    p = commands.add_parser(
        "train",
        help="train a model (default: the SINGA CNN on the embedded digits)",
        description="Train a zoo model and print, per epoch, the loss, the test accuracy, "
        "images per second (counted from the run's second batch, leaving out the first, which "
        "sets the step up, and any batch during which Numba compiles kernels) and the pool's "
        "peak memory; then a summary.",
    )
    model = p.add_mutually_exclusive_group()
    model.add_argument(
        "--model",
        default=flags.DEFAULT_MODEL,
        type=trainable_model,
        choices=TRAINABLE,
        help=f"the zoo model to train; {' and '.join(untrainable)} "
        f"{'needs' if len(untrainable) == 1 else 'need'} larger images than any data set --data "
        "loads: nnmem plan plans them",
    )
    onnx_model.add_train_argument(model)
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
    p.add_argument(
        "--recompute",
        default="none",
        choices=list(recompute.POLICIES),
        help="graph mode: drop cheap forward results and rebuild them in backward, as nnmem plan "
        "--recompute plans it: speed (keep what is rebuilt until its last use), memory (rebuild "
        "for each use: least memory), cost-aware (keep what cannot raise the peak)",
    )
    flags.offload_flags(p)
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
    p.add_argument(
        "--precision",
        default="float32",
        choices=["float32", "float16"],
        help="float16: mixed precision (float16 storage, float32 master weights, dynamic loss "
        "scaling; a step whose gradients overflow is skipped)",
    )
    p.add_argument("--seed", type=arguments.non_negative_int, default=0)
    dist_flags(p)
    p.add_argument(
        "--save-states",
        type=arguments.output_file,
        metavar="ZIP",
        default=None,
        help="after each epoch, write the model's states to this checkpoint (SINGA's format; "
        "under mpiexec, rank 0 writes it), with the epochs done and the optimizer's and "
        "dropout's positions as auxiliary states, for --resume",
    )
    p.add_argument(
        "--resume",
        metavar="ZIP",
        default=None,
        help="go on from a checkpoint --save-states wrote: load the model's states, the "
        "optimizer's and the epochs done, then train the epochs after them up to --epochs (the "
        "total). Each epoch's data order is a function of --seed and the epoch's number: with "
        "the same flags, the run ends with the bits of one that was never stopped (except "
        "under mpiexec with a sparse --dist-option: the gradient residuals each rank holds "
        "back are not saved)",
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
        help="before training, measure one step's memory (no recycling, eager, graph, graph + "
        "cost-aware recomputation; with --offload, also its compute and copy lanes, sync and "
        "async): FILE.png plots it with the lower bound and writes the data beside it as JSON "
        "(same name, .json); FILE.html writes the memory viewer (one page): click an operation "
        "to list the tensors live there",
    )
    p.set_defaults(run=run)


def run(args):
    flags.check_offload_flags(args, default_offload="none", example_budget="512MiB")
    flags.check_memory_flags(
        args,
        "512MiB",
        [
            (f"--recompute {args.recompute}", args.recompute != "none"),
            (f"--offload {args.offload}", args.offload != "none"),
            ("--no-graph", args.no_graph),
            (f"--concurrency {args.concurrency}", args.concurrency != "off"),
        ],
    )
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
    if args.recompute != "none" and args.no_graph:
        raise UsageError(
            "argument --recompute: recomputation rewrites a recorded step; leave out --no-graph"
        )
    if args.resume is not None and not os.path.isfile(args.resume):
        raise UsageError(
            f"argument --resume: {args.resume!r} is not a file; give a checkpoint that "
            "nnmem train --save-states wrote"
        )
    require_matplotlib(args.timeline)
    if args.onnx is not None:  # read and checked before any data is loaded
        args.onnx_model = onnx_model.read_for_training(args)
        args.model = args.onnx_model.name
    args.depth = flags.depth_of(args)
    if args.model == "resnet":  # the depth's own rules (6n + 2, ...), before any data is loaded
        flags.check_depth_rules(lambda: make_model(args, num_classes=10, num_channels=1))
    world_size = launched_with_mpi()
    check_dist_flags(args, world_size)
    x_train, y_train, x_test, y_test = load(args.data)
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    if args.onnx_model is None:
        check_image_size(args.model, args.data, x_train.shape[1:])
    else:
        fitted = onnx_model.fit_data(args.onnx_model, args.data, x_train, x_test, num_classes)
        x_train, x_test = fitted
    if args.batch_size > len(x_train):
        raise UsageError(
            f"argument --batch-size/--batch: {args.batch_size} is more than the "
            f"{len(x_train)} training images of {args.data}; use at most "
            f"{len(x_train)}"
        )
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


def train(args, dev, data, num_classes, dist=None):
    """Compile the model (and load --resume), then train it epoch by epoch, printing one line
    per epoch and a summary at the end (with `dist`, a DistOpt: on this rank's shard, and on
    rank 0 only the printing and the checkpoints)."""
    x_train, y_train, x_test, y_test = data
    rank, world_size = (0, 1) if dist is None else (dist.global_rank, dist.world_size)
    say = print if rank == 0 else _quiet
    dev.SetRandSeed(args.seed)
    model = make_model(args, num_classes, x_train.shape[1])
    optimizer = make_optimizer(args) if dist is None else dist
    model.set_optimizer(optimizer)
    optimizer = optimizer if dist is None else dist.opt  # the one whose states are saved
    batch = args.batch_size
    tx = tensor.PlaceHolder((batch,) + x_train.shape[1:], dev)
    ty = tensor.PlaceHolder((batch,), dev, tensor.int32)
    model.compile(
        [tx],
        is_train=True,
        use_graph=not args.no_graph,
        sequential=False,
        recompute=args.recompute,
        offload=args.offload,
        budget=args.budget,
        async_offload=not args.sync_offload,
        concurrency=args.concurrency,
        memory=args.memory,
        precision=args.precision,
    )
    epochs_done = 0 if args.resume is None else resumed(args, model, optimizer, dev)
    say(
        f"{args.model} on {args.data}: {len(x_train) * world_size} training / {len(x_test)} test "
        f"images {x_train.shape[1:]}, {sum(p.size() for p in model.get_params().values()):,} "
        f"parameters, batch {batch}, pool {format_bytes(dev.pool.capacity)}"
        + ("" if args.budget is None else f", budget {format_bytes(args.budget)}")
        + ("" if args.offload == "none" else f", offload {args.offload}")
        + ("" if args.recompute == "none" else f", recompute {args.recompute}")
        + ("" if args.memory == "heuristic" else ", memory optimal")
        + (
            ""
            if dist is None
            else f", {world_size} ranks (batch {batch} and {numba.get_num_threads()} thread(s) "
            f"each), dist option {dist.dist_option}"
        )
        + ("" if args.resume is None else f", resumed after epoch {epochs_done}")
    )
    steps = len(x_train) // batch
    if args.max_batches is not None:
        steps = min(steps, args.max_batches)
    before_step = StateCopy(model)
    report = TrainReport(
        batch * world_size,
        args.concurrency,
        say=tqdm.write if rank == 0 else _quiet,  # above the progress bar
        step_of=lambda: model.compiled_step(tx, ty),
    )
    saver = Saver(args.save_states) if args.save_states and rank == 0 else None
    accuracies, peak = {}, 0  # {epoch number: test accuracy}, the highest epoch peak
    with report.watch:  # kernels compile from here on (the timeline's steps run them too)
        if args.timeline and rank == 0:
            write_train_timeline(args, x_train[:batch], y_train[:batch], num_classes)
        started = time.perf_counter()
        for epoch in range(epochs_done, args.epochs):
            dev.reset_peak_memory_stats()
            sent = 0 if dist is None else dist.wire_bytes
            losses = train_epoch(
                args, model, tx, ty, before_step, x_train, y_train, epoch, steps, report
            )
            epoch_peak = dev.memory_stats()["allocated_bytes.peak"]
            # what the optimal planner decided, read while the model is in training mode
            decided = model.compiled_step(tx, ty).optimal if args.memory == "optimal" else None
            # Every rank evaluates (the same parameters: the same accuracy), so that none waits
            # in the next step's exchange, against its timeout, while rank 0 alone evaluates.
            accuracy = evaluate(model, tx, x_test, y_test)
            if rank != 0:
                continue
            accuracies[epoch + 1], peak = accuracy, max(peak, epoch_peak)
            print(
                f"epoch {epoch + 1}: loss {np.mean(losses):.4f}  test accuracy {accuracy:.4f}  "
                f"{report.speed.report()}  peak pool memory {format_bytes(epoch_peak)}"
                + offload_summary(dev.memory_stats())
                + (
                    ""
                    if dist is None
                    else f"  sent {format_bytes((dist.wire_bytes - sent) // steps)}/step"
                )
            )
            if decided is not None and epoch == epochs_done:
                print(optimal_summary(decided))
            if saver is not None:
                saver.save(model, optimizer, dev, epochs_done=epoch + 1)
                print(f"  states written to {args.save_states}")
        report.end_run()
    if rank == 0:
        seconds = time.perf_counter() - started
        print(summary_line(seconds, accuracies, peak, args.save_states))


def _quiet(*args, **kwargs):
    """print, on the ranks that do not print (all but rank 0)."""


def train_epoch(args, model, tx, ty, before_step, x_train, y_train, epoch, steps, report):
    """Train on `steps` shuffled batches, copied into tx and ty; return their losses. A loss
    that is NaN or Inf stops the run (see diverged). `report`, a TrainReport, times each batch."""
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
            started = report.start_batch()
            tx.copy_from_numpy(x)
            ty.copy_from_numpy(y)
            before_step.save()
            _, loss = model(tx, ty)
            losses.append(float(tensor.to_numpy(loss)[0]))
            if not math.isfinite(losses[-1]):
                raise diverged(args, model, before_step, tx, x, losses[-1], epoch, step)
            report.end_batch(started)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
            bar.update()
    return losses


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
        out = model(tx)  # an ONNX model's forward gives a list of outputs: the first
        logits = tensor.to_numpy(out[0] if isinstance(out, list) else out)[: len(yb)]
        correct += int((logits.argmax(axis=1) == yb).sum())
    return correct / len(y)


def _pad(xb, batch):
    """xb with zero samples appended up to `batch` samples."""
    if len(xb) == batch:
        return xb
    padding = np.zeros((batch - len(xb),) + xb.shape[1:], xb.dtype)
    return np.concatenate([xb, padding])
