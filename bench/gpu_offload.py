"""vDNNExt's claim on the GPU: offloading every activation, asynchronously, costs little time.

    python bench/gpu_offload.py [--models vgg16 resnet50] [--step-seconds 0.6] [--warmup 2]
                                [--steps 3] [--probe-batch 16] [--max-batch 1024] [--smoke]
                                [--json out.json]

For VGG-16 and ResNet-50 (ImageNet stem) at 224x224, graph mode, SGD with momentum, on one
fixed random batch:

1. the batch: the largest whose step fits the GPU's default pool without offloading, found
   on shapes alone (gpu_common.planned_peaks: a planning device for the CUDA device), and at
   most what keeps a step under --step-seconds, as a probe at --probe-batch times it;
2. three runs from the same seed, each on the same device: no offloading, offload="all" with
   vDNN's synchronous engine (async_offload=False: the host waits for the copies at every
   layer's end), and with vDNNExt's asynchronous one (the copies on their own stream, waited
   for only where a kernel reads their bytes). Per step: its seconds, and from
   dev.memory_stats() the offload.* figures of graph/engine.py (transfer and stall seconds,
   overlap = the fraction of transfer time hidden behind compute, bytes each way); the
   medians over the --steps steps after --warmup (the first records and plans, the second
   captures the CUDA graph).

Every convolution runs "gemm" (gpu_common.use_conv_algorithm says why). The floors, PASS/FAIL
lines (exit status 1 when one fails): the asynchronous step at most 1.10x the step without
offloading, its stall at most half the synchronous one's, its overlap at least 0.90, and the
losses of all three runs identical, bit for bit. Exit status 2 (one line) without a GPU;
--smoke runs it all on the CPU (its copy link throttled to 1 GB/s) with tiny nets.
"""

import argparse
import sys
import warnings

from gpu_common import (
    Results,
    affine_guess,
    build,
    count_launches,
    gib,
    gpu_name,
    gpu_pool_bytes,
    largest_batch,
    make_device,
    planned_peaks,
    refusal,
    release_gpu,
    summary,
    timed_steps,
)
from train import emit_json

from nnmem.cli.arguments import output_file, positive_float, positive_int
from nnmem.models import create_model

#: name -> (arguments of create_model, input shape); --smoke: (the same at a quarter width, 32x32)
NETS = {
    "vgg16": (dict(name="vgg16", num_classes=1000), (3, 224, 224)),
    "resnet50": (dict(name="resnet", depth=50, stem="imagenet", num_classes=1000), (3, 224, 224)),
}
SMOKE_WIDTH, SMOKE_SHAPE = 0.25, (3, 32, 32)
MODES = {
    "none": {},
    "sync": dict(offload="all", async_offload=False),
    "async": dict(offload="all", async_offload=True),
}
ALGORITHM = "gemm"
CAPTURE_WARNING = "cannot be captured as a CUDA graph"
#: The floors: async step / no-offload step, async stall / sync stall, async overlap.
MAX_SLOWDOWN, MAX_STALL_RATIO, MIN_OVERLAP = 1.10, 0.5, 0.90

warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")


def net(name, smoke):
    """(a function making a new model, the input shape without the batch)."""
    kwargs, shape = NETS[name]
    kwargs = dict(kwargs, width=SMOKE_WIDTH) if smoke else kwargs
    return (lambda: create_model(**kwargs)), SMOKE_SHAPE if smoke else shape


def choose_batch(make, shape, args, figures):
    """The batch to run: the largest that fits the default pool without offloading (planned),
    capped so that a step takes about --step-seconds (timed at --probe-batch)."""
    limit = gpu_pool_bytes(args.smoke)

    def peak(batch):
        return planned_peaks(make, (batch,) + shape, args.smoke, ALGORITHM)[0]

    fits = figures["batch_fits_without_offload"] = largest_batch(
        lambda b: peak(b) <= limit, affine_guess(peak, limit), args.max_batch
    )
    probe = min(args.probe_batch, fits)
    dev = make_device(args.smoke, int(1.2 * peak(probe)) + 2**28)
    model, tx, ty = build(make, (probe,) + shape, dev, algorithm=ALGORITHM)
    run = timed_steps(model, tx, ty, dev, args.warmup + 2)
    per_image = summary(run, args.warmup)["step_seconds"] / probe
    del model, tx, ty, dev
    release_gpu(args.smoke)
    by_time = max(1, int(args.step_seconds / per_image))
    batch = min(fits, by_time)
    batch -= batch % 8 if batch >= 16 else 0  # a round batch
    figures.update(
        probe_batch=probe,
        probe_seconds_per_image=per_image,
        batch_for_step_seconds=by_time,
        batch=batch,
        planned_peak_bytes=peak(batch),
    )
    return batch


def run_mode(make, shape, dev, launches, options, steps, warmup):
    """One mode's run on `dev`: its figures, losses and capture warnings."""
    before = dict(launches)
    dev.reset_peak_memory_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        model, tx, ty = build(make, shape, dev, algorithm=ALGORITHM, **options)
        run = timed_steps(model, tx, ty, dev, warmup + steps)
    figures = summary(run, warmup)
    figures.update(
        losses=run["losses"],
        step_seconds_each=run["seconds"],
        peak_bytes=dev.memory_stats()["allocated_bytes.peak"],
        replays={k: launches[k] - before[k] for k in launches},
        capture_warnings=[str(w.message) for w in caught if CAPTURE_WARNING in str(w.message)],
    )
    return figures


def measure(name, args, results):
    make, shape = net(name, args.smoke)
    figures = results["models"][name] = {"input_shape": shape}
    batch = choose_batch(make, shape, args, figures)
    results.save()
    print(
        f"{name}: batch {batch} (fits without offload: {figures['batch_fits_without_offload']}, "
        f"for {args.step_seconds} s a step: {figures['batch_for_step_seconds']}), planned peak "
        f"{gib(figures['planned_peak_bytes'])}",
        flush=True,
    )
    pool = min(gpu_pool_bytes(args.smoke), int(1.15 * figures["planned_peak_bytes"]) + 2**29)
    dev = make_device(args.smoke, pool, link_gbps=1.0 if args.smoke else None)
    launches = count_launches(dev)
    figures["pool_bytes"], figures["modes"] = pool, {}
    for mode, options in MODES.items():
        r = run_mode(make, (batch,) + shape, dev, launches, options, args.steps, args.warmup)
        figures["modes"][mode] = r
        results.save()
        release_gpu(args.smoke)
        print(
            f"  {mode:5}: {r['step_seconds'] * 1e3:8.1f} ms/step, transfer "
            f"{r.get('transfer_seconds', 0) * 1e3:7.1f} ms, stall "
            f"{r.get('stall_seconds', 0) * 1e3:7.1f} ms, overlap {r.get('overlap', 1):.3f}, "
            f"peak {gib(r['peak_bytes'])}, replays {r['replays']}",
            flush=True,
        )
    return figures


def check(name, figures, results):
    none, sync, asyn = (figures["modes"][m] for m in MODES)
    slowdown = asyn["step_seconds"] / none["step_seconds"]
    results.check(
        f"{name}: async offload step <= {MAX_SLOWDOWN}x no offload",
        slowdown <= MAX_SLOWDOWN,
        f"{slowdown:.3f}x (sync: {sync['step_seconds'] / none['step_seconds']:.3f}x)",
    )
    results.check(
        f"{name}: async stall <= {MAX_STALL_RATIO} x sync stall",
        asyn["stall_seconds"] <= MAX_STALL_RATIO * sync["stall_seconds"],
        f"{asyn['stall_seconds'] * 1e3:.2f} ms against {sync['stall_seconds'] * 1e3:.2f} ms",
    )
    results.check(
        f"{name}: async overlap >= {MIN_OVERLAP}",
        asyn["overlap"] >= MIN_OVERLAP,
        f"{asyn['overlap']:.3f} of {asyn['transfer_seconds'] * 1e3:.1f} ms of transfer hidden",
    )
    same = none["losses"] == sync["losses"] == asyn["losses"]
    results.check(
        f"{name}: losses identical with and without offloading",
        same,
        f"{len(none['losses'])} steps, last {none['losses'][-1]!r}",
    )
    results.check(
        f"{name}: async offload step captured as a CUDA graph, no capture warning",
        captured_cleanly(asyn, results["smoke"]),
        f"replays {asyn['replays']}, warnings {asyn['capture_warnings']}",
    )


def captured_cleanly(run, smoke):
    """No capture warning, and (on the GPU: a CPU captures nothing) replays captured."""
    return not run["capture_warnings"] and (smoke or run["replays"]["captured"] > 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(NETS), choices=list(NETS))
    parser.add_argument("--step-seconds", type=positive_float, default=0.6)
    parser.add_argument("--warmup", type=positive_int, default=2, help="untimed steps first")
    parser.add_argument("--steps", type=positive_int, default=3, help="timed steps per mode")
    parser.add_argument("--probe-batch", type=positive_int, default=16)
    parser.add_argument("--max-batch", type=positive_int, default=1024)
    parser.add_argument("--smoke", action="store_true", help="the code paths on the CPU, tiny")
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    why = refusal(args.smoke, torch_needed=False)
    if why is not None:
        print(f"bench/gpu_offload.py: {why}", file=sys.stderr)
        sys.exit(2)
    results = Results(args.json, gpu=gpu_name(args.smoke), smoke=args.smoke, models={})
    results.put("settings", vars(args))
    for name in args.models:
        check(name, measure(name, args, results), results)
    results.put("pass", not results.failed)
    emit_json(results, None)
    sys.exit(0 if results["pass"] else 1)


if __name__ == "__main__":
    main()
