"""The convolution kernels one pass at a time: GFLOP/s of each algorithm on ResNet's shapes.

    python bench/conv.py [--shapes 32,16,32,16,1 ...] [--repeats 7] [--json out.json]
    python bench/conv.py --in-step resnet20 [--steps 10] [--repeats 7] [--json out.json]

A shape is N,C,H,O,S[,K]: batch, channels, height = width, filters, stride, and the filters'
size K, 3 (padding 1) or 1 (no padding); 3 when left out. The defaults are ResNet-20's at batch
32: its three stages (16, 32 and 64 channels of 32x32, 16x16 and 8x8), its two stride-2
convolutions and a 1x1 stride-2 projection shortcut; two wider layers where the GEMM takes
over (kernels/cpu/conv3x3.py and nnmem/ops/conv_geometry.py's CONV3X3_FIRST_UP_TO say why); and two
1x1 convolutions of a ResNet-50 bottleneck (256 channels of 14x14 to 64 filters, and back).

Each pass (forward, backward data, backward filter) of each algorithm that applies (conv3x3
to 3x3 stride 1, conv3x3s2 to 3x3 stride 2, conv1x1 to 1x1; gemm with a workspace that holds
the whole batch; direct with none) is timed on the same float32 arrays, fastest of --repeats
runs after one that may compile; GFLOP/s counts 2 * N * O * OH * OW * C * K^2 floating-point
operations a pass. For a yardstick
the script also times OpenBLAS's sgemm on one thread (1024 x 1024 x 1024): this machine's
peak is about that figure times the number of cores. The last line is the JSON.

--in-step CASE measures instead every convolution pass of one compiled training step of a
train.py case (resnet20, cnn, ...) inside the step and alone, on the same arrays, with the
floors each pass at least 90% of its speed alone there, and conv3x3's at least 75% of the
peak (conv_step.py says how).
"""

import argparse
import os
import sys
import time

import numpy as np

import nnmem.kernels.cpu as K
from nnmem.cli.arguments import output_file, positive_int
from nnmem.kernels import sizes
from nnmem.kernels.cpu import blas

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conv_step  # noqa: E402
from train import CASES, emit_json  # noqa: E402

RESNET20 = ["32,16,32,16,1", "32,32,16,32,1", "32,64,8,64,1", "32,16,32,32,2", "32,32,16,64,2"]
RESNET20 += ["32,16,32,32,2,1"]
WIDER = ["8,256,8,256,1", "4,512,4,512,1"]
BOTTLENECK = ["8,256,14,64,1,1", "8,64,14,256,1,1"]


def shape(text):
    """(N, C, H, O, S, K) from "N,C,H,O,S" or "N,C,H,O,S,K", positive integers, K 1 or 3 (3 when
    left out) (argparse's type: a bad one is a one-line error naming the flag)."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    values += (3,) * (len(values) == 5)
    if len(values) != 6 or min(values) < 1 or values[5] not in (1, 3):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give N,C,H,O,S[,K] (batch, channels, height, filters, stride, filter "
            "size 1 or 3), positive integers, e.g. 32,16,32,16,1 or 32,16,32,32,2,1"
        )
    return values


def fastest(fn, repeats):
    """Seconds of the fastest of `repeats` runs of fn(), after one untimed run."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def passes(n, c, h, o, s, k, rng):
    """{algorithm: {pass: function}} for the shape, on fresh arrays."""
    p = k // 2
    x = rng.standard_normal((n, c, h, h), dtype=np.float32)
    w = rng.standard_normal((o, c, k, k), dtype=np.float32)
    _, _, oh, ow = sizes.conv2d_output_shape(n, c, h, h, o, k, k, s, s, p, p)
    dy = rng.standard_normal((n, o, oh, ow), dtype=np.float32)
    y, dx, dw = np.empty_like(dy), np.empty_like(x), np.empty_like(w)
    gemm_ws = np.empty(
        n * sizes.conv2d_gemm_workspace_per_sample(c, h, h, o, k, k, s, s, p, p), x.dtype
    )
    runs = {
        "gemm": {
            "forward": lambda: K.conv2d_forward_gemm(y, x, w, gemm_ws, s, s, p, p),
            "backward data": lambda: K.conv2d_backward_data_gemm(dx, dy, w, gemm_ws, s, s, p, p),
            "backward filter": lambda: K.conv2d_backward_filter_gemm(
                dw, dy, x, gemm_ws, s, s, p, p
            ),
        },
        "direct": {
            "forward": lambda: K.conv2d_forward_direct(y, x, w, s, s, p, p),
            "backward data": lambda: K.conv2d_backward_data_direct(dx, dy, w, s, s, p, p),
            "backward filter": lambda: K.conv2d_backward_filter_direct(dw, dy, x, s, s, p, p),
        },
    }
    # the kernels of one geometry, each with the workspace the batch needs
    for name, applies, per_sample in (
        ("conv3x3", sizes.conv3x3_applies, sizes.conv3x3_workspace_per_sample(c, o, h, h)),
        ("conv3x3s2", sizes.conv3x3s2_applies, sizes.conv3x3s2_workspace_per_sample(c, o, h, h)),
    ):
        if applies(k, k, s, s, p, p):
            ws = np.empty(n * per_sample, x.dtype)
            runs[name] = {
                "forward": lambda f=getattr(K, f"{name}_forward"), ws=ws: f(y, x, w, ws),
                "backward data": lambda f=getattr(K, f"{name}_backward_data"), ws=ws: f(
                    dx, dy, w, ws
                ),
                "backward filter": lambda f=getattr(K, f"{name}_backward_filter"), ws=ws: f(
                    dw, dy, x, ws
                ),
            }
    if sizes.conv1x1_applies(k, k, s, s, p, p):
        ws1 = np.empty(n * sizes.conv1x1_workspace_per_sample(c, h, h, s, s), x.dtype)
        runs["conv1x1"] = {
            "forward": lambda: K.conv1x1_forward(y, x, w, ws1, s, s),
            "backward data": lambda: K.conv1x1_backward_data(dx, dy, w, ws1, s, s),
            "backward filter": lambda: K.conv1x1_backward_filter(dw, dy, x, ws1, s, s),
        }
    return runs, 2.0 * n * o * oh * ow * c * k * k


def sgemm_one_thread(repeats):
    """GFLOP/s of one 1024^3 sgemm on one OpenBLAS thread (None without NumPy's OpenBLAS)."""
    if blas.FOUND is None:
        return None
    a = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)
    out = np.empty_like(a)
    saved = blas.FOUND.get_threads()
    blas.FOUND.set_threads(1)
    try:
        seconds = fastest(lambda: np.matmul(a, a, out=out), repeats)
    finally:
        blas.FOUND.set_threads(saved)
    return 2.0 * 1024**3 / seconds / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes",
        nargs="+",
        type=shape,
        default=[shape(text) for text in RESNET20 + WIDER + BOTTLENECK],
        help="N,C,H,O,S[,K] each",
    )
    parser.add_argument("--repeats", type=positive_int, default=7)
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    parser.add_argument(
        "--in-step",
        choices=list(CASES),
        help="time the convolution passes of this train.py case's step, in it and alone",
    )
    parser.add_argument("--steps", type=positive_int, default=10, help="steps timed (--in-step)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    peak = sgemm_one_thread(args.repeats)
    if peak is not None:
        print(f"OpenBLAS sgemm 1024^3 on one thread: {peak:.0f} GFLOP/s")
    if args.in_step:
        cores = len(os.sched_getaffinity(0))
        total = None if peak is None else cores * peak
        if total is not None:
            print(f"peak: {cores} cores x {peak:.0f} = {total:.0f} GFLOP/s")
        rows = conv_step.in_step(args.in_step, args.steps, args.repeats)
        floors = conv_step.report(rows, total)
        emit_json(
            {
                "case": args.in_step,
                "sgemm_one_thread_gflops": peak,
                "peak_gflops": total,
                "in_step": rows,
                "floors": floors,
            },
            args.json,
        )
        return
    results = []
    print(
        f"{'N,C,HxW,O,stride[,1x1]':22} {'algorithm':9} {'forward':>16} {'data':>16} {'filter':>16}"
    )
    for n, c, h, o, s, k in args.shapes:
        runs, flop = passes(n, c, h, o, s, k, rng)
        for algorithm, fns in runs.items():
            row = {"shape": [n, c, h, o, s, k], "algorithm": algorithm}
            cells = []
            for name, fn in fns.items():
                seconds = fastest(fn, args.repeats)
                row[name] = {"ms": seconds * 1e3, "gflops": flop / seconds / 1e9}
                cells.append(f"{seconds * 1e3:6.2f} ms {flop / seconds / 1e9:4.0f} GF")
            results.append(row)
            label = f"{n},{c},{h}x{h},{o},{s}" + (",1x1" if k == 1 else "")
            print(f"{label:22} {algorithm:9} " + " ".join(cells), flush=True)
    emit_json({"sgemm_one_thread_gflops": peak, "passes": results}, args.json)


if __name__ == "__main__":
    main()
