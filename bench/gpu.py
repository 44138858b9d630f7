"""GPU training: nnmem graph mode versus PyTorch on the same GPU, one run.

    python bench/gpu.py [--steps 50] [--warmup 5] [--models cnn resnet20 resnet50]
                        [--precision float32 float16] [--smoke] [--json out.json]

For each model (the seed CNN, batch 64, 1x28x28; ResNet-20, batch 32, 3x32x32; ResNet-50 with
the ImageNet stem, batch 32, 3x224x224; random data made here) and precision, SGD steps are
timed on one fixed batch: nnmem compiled in graph mode on device.create_cuda_gpu(), then the
same net in PyTorch (bench/torch_models.py, bench/gpu_torch.py) in its default eager mode.
precision="float16" compiles nnmem with compile(..., precision="float16") (mixed precision:
float16 storage, float32 master weights, dynamic loss scaling) against PyTorch's automatic
mixed precision (torch.autocast to float16 and a GradScaler). Warm-up steps (JIT compilation,
the graph's recording, cuDNN's first calls) are left out; each side waits for its GPU before
reading the clock (dev.Sync(), torch.cuda.synchronize()). Peak memory is counted over the
timed steps: the pool's allocated_bytes.peak for nnmem, torch.cuda.max_memory_allocated() for
PyTorch, each reset after warm-up.

The floors, printed as PASS/FAIL lines (exit status 1 when one fails): nnmem's images/second
at least FLOORS[model] times PyTorch's (its AMP's, in float16), and nnmem's graph-mode peak at
most PyTorch's. It refuses to run (exit status 2, one line on stderr) on Numba's CUDA
simulator, without a GPU, or without PyTorch with CUDA; --smoke runs the same code on the CPU
(both frameworks) at batch 2 and at most 32x32, a test of the code paths whose figures mean
nothing.
"""

import argparse
import gc
import os
import sys
import time
import warnings

import numpy as np
from gpu_common import Results, count_launches, gib, make_device, refusal
from train import CASES as TRAIN_CASES
from train import LR, MOMENTUM, WEIGHT_DECAY, emit_json

from nnmem import opt, tensor
from nnmem.cli.arguments import output_file, positive_int
from nnmem.models import create_model

CASES = {name: TRAIN_CASES[name] for name in ("cnn", "resnet20")}
CASES["resnet50"] = dict(
    model="resnet",
    batch=32,
    shape=(3, 224, 224),
    kwargs=dict(depth=50, stem="imagenet", num_channels=3),
)
#: nnmem's pool on the GPU. Not the default (most of the free memory), which would leave
#: PyTorch, in the same process, little more than its CUDA context. NNMEM_POOL_BYTES overrides.
POOL_BYTES = {"cnn": "4GiB", "resnet20": "4GiB", "resnet50": "12GiB"}
#: The throughput floors: nnmem's images/second over PyTorch's, per model (either precision).
FLOORS = {"cnn": 0.5, "resnet20": 1.0, "resnet50": 0.5}
#: --smoke's CPU pool: ResNet-50's parameters, gradients and momentum at full width
SMOKE_POOL_BYTES = "1GiB"

# Numba warns at every small launch ("Grid size 8 will likely result in GPU under-utilization
# due to low occupancy"), with a warning class of its own in numba-cuda: matched by its text.
# The images/second below are what this benchmark says about that.
warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")


def smoke_case(case):
    """The case at batch 2 and at most 32x32 (ResNet-50's ImageNet stem takes 32x32 too)."""
    shape = case["shape"][:1] + tuple(min(32, s) for s in case["shape"][1:])
    return dict(case, batch=2, shape=shape)


def nnmem_run(name, case, steps, warmup, precision="float32", smoke=False, seed=0):
    """Images/second and memory of nnmem graph-mode training on a new device."""
    pool_bytes = os.environ.get("NNMEM_POOL_BYTES", POOL_BYTES[name])
    dev = make_device(smoke, SMOKE_POOL_BYTES if smoke else pool_bytes)
    launches = count_launches(dev)
    dev.SetRandSeed(seed)
    model = create_model(case["model"], num_classes=10, **case["kwargs"])
    model.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY))
    batch = case["batch"]
    tx = tensor.PlaceHolder((batch,) + case["shape"], dev)
    ty = tensor.PlaceHolder((batch,), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True, precision=precision)
    rng = np.random.default_rng(seed)
    tx.copy_from_numpy(rng.random(tx.shape, dtype=np.float32))
    ty.copy_from_numpy(rng.integers(0, 10, batch).astype(np.int32))
    start = time.perf_counter()
    for _ in range(warmup):  # JIT compilation, the recording and planning of the graph
        model(tx, ty)
    dev.Sync()
    warmup_seconds = time.perf_counter() - start
    dev.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        model(tx, ty)
    dev.Sync()
    seconds = time.perf_counter() - start
    stats = dev.memory_stats()
    scaler = vars(model.optimizer).get("loss_scaler")
    return {
        "images_per_second": steps * batch / seconds,
        "peak_bytes": stats["allocated_bytes.peak"],
        "high_water_bytes": stats["high_water_bytes"],
        "warmup_seconds": warmup_seconds,
        "replays": dict(launches),  # captured as one CUDA graph launch, or call by call
        "skipped_steps": None if scaler is None else scaler.skipped_steps,
    }


def torch_run(case, steps, warmup, precision="float32", smoke=False):
    """Images/second and memory of the same net and settings in PyTorch (float32, or its
    automatic mixed precision)."""
    import gpu_torch  # here: without PyTorch the script still refuses in one line

    step = gpu_torch.training_step(
        gpu_torch.twin(case), case["batch"], case["shape"], smoke, precision
    )
    for _ in range(warmup):
        step()
    gpu_torch.synchronize(smoke)
    gpu_torch.reset_peak(smoke)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    gpu_torch.synchronize(smoke)
    seconds = time.perf_counter() - start
    return {
        "images_per_second": steps * case["batch"] / seconds,
        "peak_bytes": gpu_torch.peak_bytes(smoke),
    }


def measure(name, steps, warmup, precision="float32", smoke=False):
    """Both frameworks on one model, one after the other; their ratios and floors."""
    case = smoke_case(CASES[name]) if smoke else CASES[name]
    r = {"batch": case["batch"], "precision": precision}
    r["nnmem"] = nnmem_run(name, case, steps, warmup, precision, smoke)
    gc.collect()  # the nnmem device, its pool and model go before PyTorch's run
    r["pytorch"] = torch_run(case, steps, warmup, precision, smoke)
    gc.collect()
    n, t = r["nnmem"], r["pytorch"]
    r["throughput_ratio"] = n["images_per_second"] / t["images_per_second"]
    r["throughput_floor_met"] = r["throughput_ratio"] >= FLOORS[name]
    if t["peak_bytes"] is None:  # --smoke: PyTorch's memory counters are CUDA's
        r["peak_ratio"], r["peak_floor_met"] = None, True
    else:
        r["peak_ratio"] = n["peak_bytes"] / t["peak_bytes"]
        r["peak_floor_met"] = n["peak_bytes"] <= t["peak_bytes"]
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
    parser.add_argument("--models", nargs="+", default=["cnn", "resnet20"], choices=list(CASES))
    parser.add_argument(
        "--mixed",
        nargs="*",
        default=[],
        choices=list(CASES),
        help="models also run in mixed precision (float16), beside PyTorch's AMP",
    )
    parser.add_argument("--smoke", action="store_true", help="the code paths on the CPU, tiny")
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    why = refusal(args.smoke)
    if why is not None:
        print(f"bench/gpu.py: {why}", file=sys.stderr)
        sys.exit(2)

    import torch

    gpu = "CPU (--smoke)" if args.smoke else torch.cuda.get_device_name()
    results = Results(
        args.json, gpu=gpu, torch=torch.__version__, steps=args.steps, warmup=args.warmup
    )
    results.put("models", {})
    print(f"{gpu}, PyTorch {torch.__version__}, {args.steps} timed steps\n")
    print(
        f"{'model':16} {'batch':>5} {'nnmem img/s':>12} {'pytorch img/s':>14} {'ratio':>6} "
        f"{'nnmem peak':>11} {'pytorch peak':>13} {'ratio':>6}",
        flush=True,
    )
    runs = [(name, "float32") for name in args.models]
    runs += [(name, "float16") for name in args.mixed]
    for name, precision in runs:
        label = name if precision == "float32" else f"{name}_{precision}"
        r = measure(name, args.steps, args.warmup, precision, args.smoke)
        results["models"][label] = r
        results.save()
        n, t = r["nnmem"], r["pytorch"]
        print(
            f"{label:16} {r['batch']:5d} {n['images_per_second']:12.0f} "
            f"{t['images_per_second']:14.0f} {r['throughput_ratio']:6.2f} "
            f"{gib(n['peak_bytes']):>11} {gib(t['peak_bytes']):>13} "
            f"{'-' if r['peak_ratio'] is None else format(r['peak_ratio'], '.2f'):>6}",
            flush=True,
        )
    print()
    for label, r in results["models"].items():
        n, t = r["nnmem"], r["pytorch"]
        floor = FLOORS[label.split("_")[0]]
        yardstick = "PyTorch's AMP" if r["precision"] == "float16" else "PyTorch's"
        results.check(
            f"{label}: nnmem throughput",
            r["throughput_floor_met"],
            f"{r['throughput_ratio']:.2f}x {yardstick} (floor {floor}x)",
        )
        results.check(
            f"{label}: nnmem graph-mode peak <= torch.cuda.max_memory_allocated",
            r["peak_floor_met"],
            f"{gib(n['peak_bytes'])} against {gib(t['peak_bytes'])}",
        )
    results.put("pass", not results.failed)
    emit_json(results, None)
    sys.exit(0 if results["pass"] else 1)


if __name__ == "__main__":
    main()
