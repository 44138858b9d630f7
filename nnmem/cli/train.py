"""nnmem train: train a zoo model on a data set and report, per epoch, the loss, the test
accuracy, images per second and the pool's peak memory."""
import json
import os
import time

import numpy as np

from nnmem import device, opt, tensor
from nnmem.cli.progress import ProgressBar
from nnmem.data import iterate_batches, load
from nnmem.memory import format_bytes
from nnmem.memory.timeline import plot_timelines
from nnmem.models import MODELS, create_model
from nnmem.timelines import step_timelines


def add_parser(commands):
    p = commands.add_parser("train", help="train a model (default: the SINGA CNN on the "
                                          "embedded digits)")
    p.add_argument("--model", default="cnn", choices=sorted(MODELS))
    p.add_argument("--depth", type=int, default=20, help="ResNet depth (CIFAR: 6n+2 or 9n+2)")
    p.add_argument("--data", default="digits", help="digits, mnist:DIR or cifar10:DIR")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-5)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--pool", default=None, help="pool size, e.g. 512MiB (default 2GiB)")
    p.add_argument("--no-graph", action="store_true", help="run every step eagerly")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-batches", type=int, default=None,
                   help="stop each epoch after this many batches (quick runs)")
    p.add_argument("--timeline", metavar="PNG", default=None,
                   help="before training, plot one step's memory (no recycling, eager, graph) "
                        "with the lower bound to this PNG file, and write the data beside it "
                        "as JSON (same name, .json)")
    p.set_defaults(run=run)


def run(args):
    x_train, y_train, x_test, y_test = load(args.data)
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    dev = device.create_cuda_gpu() if args.device == "cuda" else \
        device.create_cpu_device(args.pool)
    dev.SetRandSeed(args.seed)
    model = create_model(args.model, num_classes=num_classes, num_channels=x_train.shape[1],
                         depth=args.depth)
    model.set_optimizer(opt.SGD(lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay))
    batch = args.batch_size
    if batch > len(x_train):
        raise ValueError(f"--batch-size {batch} is larger than the {len(x_train)} training images")
    tx = tensor.PlaceHolder((batch,) + x_train.shape[1:], dev)
    ty = tensor.PlaceHolder((batch,), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=not args.no_graph, sequential=False)
    print(f"{args.model} on {args.data}: {len(x_train)} training / {len(x_test)} test images "
          f"{x_train.shape[1:]}, {sum(p.size() for p in model.get_params().values()):,} "
          f"parameters, batch {batch}, pool {format_bytes(dev.pool.capacity)}")
    if args.timeline:
        plot_step_timelines(args, x_train[:batch], y_train[:batch], num_classes)
    steps = len(x_train) // batch
    if args.max_batches:
        steps = min(steps, args.max_batches)
    for epoch in range(args.epochs):
        model.train()
        dev.reset_peak_memory_stats()
        bar = ProgressBar(steps, f"epoch {epoch + 1}/{args.epochs}")
        start, losses = time.perf_counter(), []
        batches = iterate_batches(x_train, y_train, batch, seed=args.seed, drop_last=True,
                                  epoch=epoch)
        for step, (x, y) in zip(range(steps), batches):
            tx.copy_from_numpy(x)
            ty.copy_from_numpy(y)
            _, loss = model(tx, ty)
            losses.append(float(tensor.to_numpy(loss)[0]))
            bar.update(step + 1, f"loss {losses[-1]:.4f}")
        seconds = time.perf_counter() - start
        peak = dev.memory_stats()["allocated_bytes.peak"]
        accuracy = evaluate(model, dev, x_test, y_test, batch)
        print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f}  test accuracy {accuracy:.4f}  "
              f"{steps * batch / seconds:.0f} images/s  peak pool memory {format_bytes(peak)}")
    return 0


def plot_step_timelines(args, x, y, num_classes):
    """Measure one step three ways on throwaway copies of the model, and plot them."""
    def make_model():
        return create_model(args.model, num_classes=num_classes, num_channels=x.shape[1],
                            depth=args.depth)
    timelines, plan = step_timelines(make_model, x, y, args.pool, args.seed)
    for t in timelines.values():
        position, name = t.peak_step()
        print(f"  {t.label:13} peak {format_bytes(t.peak):>10} at step {position} ({name})")
    print(f"  static plan: arena {format_bytes(plan['arena_bytes'])}, lower bound "
          f"{format_bytes(plan['lower_bound_bytes'])}")
    bound = plan["persistent_bytes"] + plan["lower_bound_bytes"]
    plot_timelines(list(timelines.values()), args.timeline, lower_bound=bound,
                   title=f"{args.model}, batch {len(x)}: memory during one training step")
    data_path = os.path.splitext(args.timeline)[0] + ".json"
    with open(data_path, "w") as f:
        json.dump({"lower_bound_bytes": bound, "plan": plan,
                   "timelines": [t.as_dict() for t in timelines.values()]}, f)
    print(f"  timeline written to {args.timeline} (data: {data_path})")


def evaluate(model, dev, x, y, batch):
    """Accuracy in inference mode (BatchNorm uses running statistics, no dropout)."""
    model.eval()
    correct = 0
    for xb, yb in iterate_batches(x, y, batch, shuffle=False):
        logits = tensor.to_numpy(model(tensor.from_numpy(xb, dev)))
        correct += int((logits.argmax(axis=1) == yb).sum())
    return correct / len(y)
