"""GPU training: nnmem graph mode versus PyTorch on the same GPU, one run.

    python bench/gpu.py [--steps 50] [--warmup 5] [--models cnn resnet20] [--json out.json]

For each model (the seed CNN, batch 64, 1x28x28; ResNet-20, batch 32, 3x32x32; random data
made here), SGD steps are timed on one fixed batch: nnmem compiled in graph mode on
device.create_cuda_gpu(), then the same net in PyTorch (bench/torch_models.py) in its default
eager mode. Warm-up steps (JIT compilation, the graph's recording, cuDNN's first calls) are
left out; each side waits for its GPU before reading the clock (dev.Sync(),
torch.cuda.synchronize()). Peak memory is counted over the timed steps: the pool's
allocated_bytes.peak for nnmem, torch.cuda.max_memory_allocated() for PyTorch, each reset
after warm-up.

The floors, printed as PASS/FAIL lines (exit status 1 when one fails): nnmem's
images/second at least 0.5x PyTorch's, and nnmem's graph-mode peak at most PyTorch's.
It refuses to run (exit status 2, one line on stderr) on Numba's CUDA simulator, without a
GPU, or without PyTorch with CUDA.
"""

import argparse
import gc
import os
import sys
import time
import warnings

import numpy as np
from train import CASES as TRAIN_CASES
from train import LR, MOMENTUM, WEIGHT_DECAY, emit_json

from nnmem import device, opt, tensor
from nnmem.cli.arguments import output_file, positive_int
from nnmem.memory import format_bytes
from nnmem.models import create_model

CASES = {name: TRAIN_CASES[name] for name in ("cnn", "resnet20")}
#: nnmem's pool on the GPU. Not the default (most of the free memory), which would leave
#: PyTorch, in the same process, little more than its CUDA context. NNMEM_POOL_BYTES overrides.
POOL_BYTES = "4GiB"
#: The floors.
MIN_THROUGHPUT_RATIO = 0.5

# Numba warns at every small launch ("Grid size 8 will likely result in GPU under-utilization
# due to low occupancy"), with a warning class of its own in numba-cuda: matched by its text.
# The images/second below are what this benchmark says about that.
warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")


def refusal():
    """Why this benchmark cannot run here (a line), or None."""
    from numba import config

    if config.ENABLE_CUDASIM:
        return (
            "refusing to run on Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM is set): its "
            "timings and memory figures mean nothing; unset it on a machine with a GPU"
        )
    try:
        device.create_cuda_gpu("16MiB")
    except device.DeviceUnavailable as e:
        return str(e)
    try:
        import torch
    except ImportError:
        return "PyTorch is the yardstick and is not installed: pip install torch"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA GPU: pip install torch (a CUDA build)"
    return None


def nnmem_run(case, steps, warmup, pool_bytes=None, seed=0):
    """Images/second and memory of nnmem graph-mode training on a new CUDA device."""
    if pool_bytes is None:
        pool_bytes = os.environ.get("NNMEM_POOL_BYTES", POOL_BYTES)
    dev = device.create_cuda_gpu(pool_bytes)
    dev.SetRandSeed(seed)
    model = create_model(case["model"], num_classes=10, **case["kwargs"])
    model.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY))
    batch = case["batch"]
    tx = tensor.PlaceHolder((batch,) + case["shape"], dev)
    ty = tensor.PlaceHolder((batch,), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True)
    rng = np.random.default_rng(seed)
    tx.copy_from_numpy(rng.random(tx.shape, dtype=np.float32))
    ty.copy_from_numpy(rng.integers(0, 10, batch).astype(np.int32))
    for _ in range(warmup):  # JIT compilation, the recording and planning of the graph
        model(tx, ty)
    dev.Sync()
    dev.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        model(tx, ty)
    dev.Sync()
    seconds = time.perf_counter() - start
    stats = dev.memory_stats()
    return {
        "images_per_second": steps * batch / seconds,
        "peak_bytes": stats["allocated_bytes.peak"],
        "high_water_bytes": stats["high_water_bytes"],
    }


def torch_run(case, steps, warmup, seed=0):
    """Images/second and memory of the same net and settings in PyTorch on the GPU."""
    import torch
    from torch_models import build

    gpu = torch.device("cuda")
    torch.manual_seed(seed)
    net = build(case["model"], **case["kwargs"]).to(gpu)
    sgd = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    batch = case["batch"]
    x = torch.rand((batch,) + case["shape"], device=gpu)
    y = torch.randint(0, 10, (batch,), device=gpu)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        sgd.zero_grad()
        loss_fn(net(x), y).backward()
        sgd.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {
        "images_per_second": steps * batch / seconds,
        "peak_bytes": torch.cuda.max_memory_allocated(),
        "reserved_peak_bytes": torch.cuda.max_memory_reserved(),
    }


def measure(case, steps, warmup):
    """Both frameworks on one model, one after the other; their ratios and floors."""
    r = {"batch": case["batch"], "nnmem": nnmem_run(case, steps, warmup)}
    gc.collect()  # the nnmem device, its pool and model go before PyTorch's run
    r["pytorch"] = torch_run(case, steps, warmup)
    gc.collect()
    r["throughput_ratio"] = r["nnmem"]["images_per_second"] / r["pytorch"]["images_per_second"]
    r["peak_ratio"] = r["nnmem"]["peak_bytes"] / r["pytorch"]["peak_bytes"]
    r["throughput_floor_met"] = r["throughput_ratio"] >= MIN_THROUGHPUT_RATIO
    r["peak_floor_met"] = r["nnmem"]["peak_bytes"] <= r["pytorch"]["peak_bytes"]
    return r


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive_int, default=50, help="timed steps per framework")
    parser.add_argument(
        "--warmup",
        type=positive_int,
        default=5,
        help="untimed steps before them (at least 1: warm-up records the graph)",
    )
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    why = refusal()
    if why is not None:
        print(f"bench/gpu.py: {why}", file=sys.stderr)
        sys.exit(2)

    import torch

    results = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "steps": args.steps,
        "warmup": args.warmup,
        "models": {},
    }
    print(f"{results['gpu']}, PyTorch {results['torch']}, {args.steps} timed steps\n")
    print(
        f"{'model':9} {'batch':>5} {'nnmem img/s':>12} {'pytorch img/s':>14} {'ratio':>6} "
        f"{'nnmem peak':>11} {'pytorch peak':>13} {'ratio':>6}"
    )
    for name in args.models:
        r = results["models"][name] = measure(CASES[name], args.steps, args.warmup)
        n, t = r["nnmem"], r["pytorch"]
        print(
            f"{name:9} {r['batch']:5d} {n['images_per_second']:12.0f} "
            f"{t['images_per_second']:14.0f} {r['throughput_ratio']:6.2f} "
            f"{format_bytes(n['peak_bytes']):>11} {format_bytes(t['peak_bytes']):>13} "
            f"{r['peak_ratio']:6.2f}"
        )
    print()
    for name, r in results["models"].items():
        n, t = r["nnmem"], r["pytorch"]
        print(
            f"{'PASS' if r['throughput_floor_met'] else 'FAIL'} {name}: nnmem throughput "
            f"{r['throughput_ratio']:.2f}x PyTorch's (floor {MIN_THROUGHPUT_RATIO}x)"
        )
        print(
            f"{'PASS' if r['peak_floor_met'] else 'FAIL'} {name}: nnmem graph-mode peak "
            f"{format_bytes(n['peak_bytes'])} {'<=' if r['peak_floor_met'] else '>'} "
            f"torch.cuda.max_memory_allocated {format_bytes(t['peak_bytes'])}"
        )
    results["pass"] = all(
        r["throughput_floor_met"] and r["peak_floor_met"] for r in results["models"].values()
    )
    emit_json(results, args.json)
    sys.exit(0 if results["pass"] else 1)


if __name__ == "__main__":
    main()
