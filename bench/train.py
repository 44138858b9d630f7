"""Training throughput: nnmem eager versus PyTorch CPU, same nets, same settings, one run.

    python bench/train.py [--steps 20] [--repeats 5] [--json out.json]

Each repeat times `steps` training steps of each framework back to back (so that both see the
same machine load), after warm-up steps that absorb JIT compilation; the median over repeats
is reported, with the ratio nnmem / PyTorch.
"""

import argparse
import json
import statistics
import time

import numpy as np

from nnmem import device, opt, tensor
from nnmem.models import create_model

CASES = {
    "cnn": dict(model="cnn", batch=64, shape=(1, 28, 28), kwargs=dict(num_channels=1)),
    "mlp": dict(model="mlp", batch=64, shape=(1, 28, 28), kwargs=dict(hidden=(256, 256))),
    "resnet20": dict(
        model="resnet", batch=32, shape=(3, 32, 32), kwargs=dict(depth=20, num_channels=3)
    ),
}
LR, MOMENTUM, WEIGHT_DECAY = 0.02, 0.9, 1e-5


def nnmem_step(case, seed=0, use_graph=False):
    """A function running one nnmem training step on a fixed random batch."""
    dev = device.create_cpu_device("2GiB")  # a device of its own: its peak is this run's
    dev.SetRandSeed(seed)
    model = create_model(case["model"], num_classes=10, **case["kwargs"])
    model.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY))
    rng = np.random.default_rng(seed)
    tx = tensor.PlaceHolder((case["batch"],) + case["shape"], dev)
    ty = tensor.PlaceHolder((case["batch"],), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=use_graph)
    tx.copy_from_numpy(rng.random(tx.shape, dtype=np.float32))
    ty.copy_from_numpy(rng.integers(0, 10, case["batch"]).astype(np.int32))
    return lambda: model(tx, ty)


def torch_step(case, seed=0):
    """The same net in PyTorch (None when torch is not importable)."""
    try:
        import torch
        from torch_models import build
    except ImportError:
        return None
    torch.manual_seed(seed)
    net = build(case["model"], **case["kwargs"])
    sgd = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    x = torch.rand((case["batch"],) + case["shape"])
    y = torch.randint(0, 10, (case["batch"],))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        sgd.zero_grad()
        loss_fn(net(x), y).backward()
        sgd.step()

    return step


def images_per_second(step, steps, batch):
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch / (time.perf_counter() - start)


def measure(name, case, steps, repeats, warmup=3, graph=False):
    """Median images/second of each runner; the runners alternate within every repeat."""
    runners = {"nnmem_eager": nnmem_step(case)}
    if graph:
        runners["nnmem_graph"] = nnmem_step(case, use_graph=True)
    reference = torch_step(case)
    if reference is not None:
        runners["pytorch"] = reference
    for run in runners.values():
        for _ in range(warmup):
            run()
    samples = {k: [] for k in runners}
    for _ in range(repeats):
        for k, run in runners.items():
            samples[k].append(images_per_second(run, steps, case["batch"]))
    result = {k: statistics.median(v) for k, v in samples.items()}
    if "pytorch" in result:
        result["ratio_eager_vs_pytorch"] = result["nnmem_eager"] / result["pytorch"]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", nargs="*", default=["cnn", "resnet20"], choices=list(CASES))
    parser.add_argument("--json", help="also write the JSON to this file")
    args = parser.parse_args()
    results = {}
    print(f"{'model':10} {'batch':>5} {'nnmem eager':>12} {'pytorch':>9} {'ratio':>6}  images/s")
    for name in args.cases:
        r = measure(name, CASES[name], args.steps, args.repeats)
        results[name] = r
        torch_ips = f"{r['pytorch']:9.0f}" if "pytorch" in r else f"{'-':>9}"
        ratio = f"{r['ratio_eager_vs_pytorch']:6.2f}" if "pytorch" in r else f"{'-':>6}"
        print(f"{name:10} {CASES[name]['batch']:5d} {r['nnmem_eager']:12.0f} {torch_ips} {ratio}")
    emit_json(results, args.json)


def emit_json(results, path=None):
    """Print the results as one JSON line (the last line of every benchmark), and save it."""
    text = json.dumps(results, sort_keys=True, default=str)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
