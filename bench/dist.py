"""Data-parallel training over MPI: throughput, scaling, bytes on the wire, one run.

    python bench/dist.py [--ranks 1 2] [--model cnn] [--batch 64] [--steps 20] [--warmup 3]
                         [--threshold N] [--json out.json]

For each number of ranks N, `mpiexec -n N` runs this script's worker: every rank trains the
model in graph mode on its own random batch of --batch images (weak scaling: N ranks train on
N times the images per step), with the same number of Numba threads in every run (the cores
divided by the largest N, so that N ranks never share a core and 1 rank is a fair unit), with
opt.DistOpt around SGD, once per dist_option: plain (float32), half (float16 on the wire),
sparseTopK (spars 0.01) and sparseThreshold (spars 0.001). Rank 0 times --steps steps after
--warmup untimed ones (compilation, recording) and reports:

- images/second of the whole job (N * batch * steps / seconds);
- scaling efficiency: images/second with N ranks / (N * images/second with 1 rank), for the
  same dist_option (1.0: the exchanges cost nothing; on one machine the ranks also share its
  memory bandwidth and caches);
- bytes this rank put on the wire per step (DistOpt.wire_bytes: the payload, not MPI's
  protocol), and the seconds per step the step waited for its exchanges (the communication
  backward did not hide);
- with one rank, SGD alone beside DistOpt: what the wrapper costs when there is nothing to
  exchange.

The last line is the JSON.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from nnmem.cli.arguments import non_negative_int, output_file, positive_int

#: DistOpt's dist_option values, each with the spars it runs with
DIST_OPTIONS = {"plain": None, "half": None, "sparseTopK": 0.01, "sparseThreshold": 0.001}
SHAPES = {"cnn": (1, 28, 28), "mlp": (1, 28, 28), "resnet": (3, 32, 32)}


def worker(args):
    import numba
    import numpy as np

    from nnmem import device, opt, tensor
    from nnmem.models import create_model

    results = []
    for dist_option in ["sgd", *DIST_OPTIONS]:  # "sgd": SGD alone, no DistOpt
        sgd = opt.SGD(lr=0.02, momentum=0.9, weight_decay=1e-5)
        if dist_option == "sgd":
            dist = None
        else:
            spars = DIST_OPTIONS[dist_option] or 0.05
            dist = opt.DistOpt(sgd, dist_option=dist_option, spars=spars)
            if args.threshold is not None:
                dist.threshold = args.threshold
        ranks = 1 if dist is None else dist.world_size
        numba.set_num_threads(args.threads)
        if dist is None and int(os.environ.get("PMI_SIZE", "1")) > 1:
            continue  # SGD alone is the 1-rank reference only
        shape = SHAPES[args.model]
        dev = device.create_cpu_device("2GiB")
        dev.SetRandSeed(0)
        model = create_model(args.model, num_channels=shape[0], depth=20)
        model.set_optimizer(dist or sgd)
        rank = 0 if dist is None else dist.global_rank
        rng = np.random.default_rng(rank)
        tx = tensor.from_numpy(rng.random((args.batch, *shape), dtype=np.float32), dev)
        ty = tensor.from_numpy(rng.integers(0, 10, args.batch).astype(np.int32), dev)
        model.compile([tx], is_train=True, use_graph=True)
        for _ in range(args.warmup):
            model(tx, ty)
        sent, waited = (0, 0.0) if dist is None else (dist.wire_bytes, dist.wait_seconds)
        dev.Sync()
        start = time.perf_counter()
        for _ in range(args.steps):
            model(tx, ty)
        dev.Sync()
        seconds = time.perf_counter() - start
        if rank == 0:
            results.append(
                dict(
                    dist_option=dist_option,
                    ranks=ranks,
                    threads=numba.get_num_threads(),
                    images_per_second=ranks * args.batch * args.steps / seconds,
                    wire_bytes_per_step=0
                    if dist is None
                    else (dist.wire_bytes - sent) // args.steps,
                    wait_seconds_per_step=0.0
                    if dist is None
                    else (dist.wait_seconds - waited) / args.steps,
                )
            )
    if results:
        print("RESULTS " + json.dumps(results), flush=True)


def launch(args, ranks):
    launcher = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    launcher = launcher if os.path.exists(launcher) else shutil.which("mpiexec")
    if launcher is None:
        sys.exit("bench/dist.py: no mpiexec: pip install 'nnmem[mpi]'")
    command = [launcher, "-n", str(ranks), sys.executable, os.path.abspath(__file__), "--worker"]
    command += ["--model", args.model, "--batch", str(args.batch), "--steps", str(args.steps)]
    command += ["--warmup", str(args.warmup), "--threads", str(args.threads)]
    if args.threshold is not None:
        command += ["--threshold", str(args.threshold)]
    done = subprocess.run(command, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULTS "):
            return json.loads(line[len("RESULTS ") :])
    sys.exit(f"bench/dist.py: {ranks} ranks failed:\n{done.stdout}\n{done.stderr}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=positive_int, nargs="+", default=[1, 2])
    p.add_argument("--model", default="cnn", choices=sorted(SHAPES))
    p.add_argument("--batch", type=positive_int, default=64)
    p.add_argument("--steps", type=positive_int, default=20)
    p.add_argument("--warmup", type=non_negative_int, default=3)
    p.add_argument(
        "--threshold", type=positive_int, default=None, help="DistOpt's fusion threshold"
    )
    p.add_argument("--json", type=output_file, default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    args.threads = max(1, (os.cpu_count() or 1) // max(args.ranks))
    rows = [row for ranks in args.ranks for row in launch(args, ranks)]
    one = {r["dist_option"]: r["images_per_second"] for r in rows if r["ranks"] == 1}
    print(
        f"{args.model}, batch {args.batch} per rank, {args.threads} thread(s) per rank, "
        f"{args.steps} timed steps, graph mode"
    )
    print(
        f"{'ranks':>5} {'dist_option':16} {'threads':>7} {'images/s':>9} {'efficiency':>10} "
        f"{'bytes/step':>11} {'wait ms/step':>12}"
    )
    for r in rows:
        base = one.get(r["dist_option"])
        r["scaling_efficiency"] = (
            None if base is None else r["images_per_second"] / (r["ranks"] * base)
        )
        efficiency = "" if base is None else f"{r['scaling_efficiency']:.2f}"
        print(
            f"{r['ranks']:>5} {r['dist_option']:16} {r['threads']:>7} "
            f"{r['images_per_second']:9.0f} {efficiency:>10} {r['wire_bytes_per_step']:>11,} "
            f"{1e3 * r['wait_seconds_per_step']:12.2f}"
        )
    result = dict(
        model=args.model, batch=args.batch, threads=args.threads, steps=args.steps, rows=rows
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
