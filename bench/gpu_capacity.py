"""Capacity on the GPU: the largest batch of ResNet-50 at 224x224 that trains, with offloading
and recomputation and without, beside PyTorch's largest.

    python bench/gpu_capacity.py [--max-batch 8192] [--no-confirm] [--smoke] [--json out.json]

1. PyTorch first (it empties its cache after): its largest batch without checkpointing, from
   the peaks of two small batches taken as a line in the batch, confirmed by one real step
   (5% less after an out-of-memory error; gpu_torch.largest_batch).
2. nnmem, graph mode, SGD with momentum, every convolution "gemm" (gpu_common.
   use_conv_algorithm), one CUDA device whose pool is the GPU's default (its free memory but
   1 GiB) and whose host pool (pinned, for offloaded tensors) is the device's own: for each
   technique -- none, recompute="memory", and offload="all" with recompute="memory" -- the
   largest batch whose two planned steps fit both pools (planning device, shapes alone;
   galloping and bisection), then one real step at that batch for "none" and for
   "offload + recompute": its seconds, and whether it ran (or the error).

PASS/FAIL lines: each batch found by planning trains for one real step (exit status 1 when one
does not). The batches themselves are figures, with no floor. Exit status 2 (one line)
without a GPU or PyTorch with CUDA; --smoke runs it all on the CPU, ResNet-50 at a quarter
width on 32x32 images in a 32 MiB pool, batches of at most 64.
"""

import argparse
import functools
import gc
import math
import sys
import time
import warnings

from gpu_common import (
    Results,
    affine_guess,
    build,
    gib,
    gpu_name,
    largest_batch,
    make_device,
    planned_peaks,
    refusal,
    release_gpu,
    timed_steps,
)
from train import emit_json

from nnmem.cli.arguments import output_file, positive_int
from nnmem.models import create_model

SHAPE = (3, 224, 224)
#: --smoke: a quarter-width ResNet-50 on 32x32 images in a pool that some batch below the cap
#: outgrows, so that the search meets both answers
SMOKE_SHAPE, SMOKE_WIDTH, SMOKE_MAX_BATCH, SMOKE_POOL_BYTES = (3, 32, 32), 0.25, 64, 32 * 2**20
TECHNIQUES = {
    "none": {},
    "recompute": dict(recompute="memory"),
    "offload + recompute": dict(offload="all", recompute="memory"),
}
CONFIRMED = ("none", "offload + recompute")  # one real step each (minutes at most together)
ALGORITHM = "gemm"

warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")


def resnet50(smoke):
    def make():
        return create_model(
            "resnet", depth=50, stem="imagenet", num_classes=1000, width=SMOKE_WIDTH if smoke else 1
        )

    return make


def pytorch_section(smoke, results):
    import gpu_torch  # here: without PyTorch the script still refuses in one line

    shape = SMOKE_SHAPE if smoke else SHAPE
    start = time.perf_counter()
    r = gpu_torch.largest_batch(shape, smoke, small=2 if smoke else 32)
    r["seconds"] = time.perf_counter() - start
    results.put("pytorch", r)
    print(
        f"PyTorch: predicted {r['predicted']}, tried {r['tried']}, largest {r['confirmed']} "
        f"({r['seconds']:.1f} s)",
        flush=True,
    )
    if not smoke:
        import torch

        gc.collect()
        torch.cuda.empty_cache()  # its memory goes back before nnmem's pool takes the GPU


def planned_section(dev, args, results):
    """{technique: largest batch} planned against the device's pool and host pool."""
    stats = dev.memory_stats()
    pool, host = stats["reserved_bytes"], stats["host.reserved_bytes"]
    results.put("pool_bytes", pool)
    results.put("host_pool_bytes", host)
    make, shape = resnet50(args.smoke), SMOKE_SHAPE if args.smoke else SHAPE
    cap = min(args.max_batch, SMOKE_MAX_BATCH) if args.smoke else args.max_batch
    planned = results.put("planned", {})

    @functools.cache  # the guess and the search plan some batches twice
    def peaks(technique, batch):
        return planned_peaks(make, (batch,) + shape, args.smoke, ALGORITHM, **TECHNIQUES[technique])

    for technique in TECHNIQUES:

        def fits(batch, technique=technique):
            device_bytes, host_bytes = peaks(technique, batch)
            return device_bytes <= pool and host_bytes <= host

        # offloading moves most bytes to the host pool, which may then bound the batch first
        guess = min(
            affine_guess(lambda b: peaks(technique, b)[0], pool),
            affine_guess(lambda b: peaks(technique, b)[1], host),
        )
        batch = largest_batch(fits, guess, cap)
        device_bytes, host_bytes = peaks(technique, batch) if batch else (None, None)
        planned[technique] = dict(batch=batch, device_bytes=device_bytes, host_bytes=host_bytes)
        results.save()
        print(
            f"nnmem {technique:20}: largest batch {batch:5d}, planned {gib(device_bytes)} "
            f"on the device (pool {gib(pool)}), {gib(host_bytes)} on the host "
            f"(pool {gib(host)})",
            flush=True,
        )
    return planned


def confirm_section(dev, planned, args, results):
    make, shape = resnet50(args.smoke), SMOKE_SHAPE if args.smoke else SHAPE
    confirmed = results.put("confirmed", {})
    for technique in CONFIRMED:
        batch = planned[technique]["batch"]
        r = confirmed[technique] = {"batch": batch}
        start = time.perf_counter()
        try:
            model, tx, ty = build(
                make, (batch,) + shape, dev, algorithm=ALGORITHM, **TECHNIQUES[technique]
            )
            run = timed_steps(model, tx, ty, dev, 1)
            r.update(step_seconds=run["seconds"][0], loss=run["losses"][0])
            r["trained"] = math.isfinite(run["losses"][0])
            del model, tx, ty
        except Exception as e:  # out of memory, most likely: the figure to report
            r.update(trained=False, error=f"{type(e).__name__}: {e}"[:500])
        r["seconds"] = time.perf_counter() - start
        release_gpu(args.smoke)
        results.save()
        results.check(
            f"nnmem {technique}: batch {batch} trains one real step",
            r["trained"],
            r.get("error", f"{r.get('step_seconds', 0):.2f} s, loss {r.get('loss')}"),
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-batch", type=positive_int, default=8192)
    parser.add_argument("--no-confirm", action="store_true", help="plan only: no real step")
    parser.add_argument("--smoke", action="store_true", help="the code paths on the CPU, tiny")
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    why = refusal(args.smoke)
    if why is not None:
        print(f"bench/gpu_capacity.py: {why}", file=sys.stderr)
        sys.exit(2)
    results = Results(args.json, gpu=gpu_name(args.smoke), smoke=args.smoke)
    pytorch_section(args.smoke, results)
    dev = make_device(args.smoke, SMOKE_POOL_BYTES if args.smoke else None)  # the whole GPU
    planned = planned_section(dev, args, results)
    if not args.no_confirm:
        confirm_section(dev, planned, args, results)
    results.put("pass", not results.failed)
    emit_json(results, None)
    sys.exit(0 if results["pass"] else 1)


if __name__ == "__main__":
    main()
