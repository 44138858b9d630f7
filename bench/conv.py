"""The convolution kernels one pass at a time: GFLOP/s of each algorithm on ResNet's shapes.

    python bench/conv.py [--shapes 32,16,32,16,1 ...] [--repeats 7] [--json out.json]

A shape is N,C,H,O,S: batch, channels, height = width, filters, stride (3x3 filters, padding
1). The defaults are ResNet-20's at batch 32: its three stages (16, 32 and 64 channels of
32x32, 16x16 and 8x8), its two stride-2 convolutions, and two wider layers where the GEMM
takes over (kernels/cpu/conv3x3.py and nnmem/ops/conv.py's CONV3X3_FIRST_UP_TO say why).

Each pass (forward, backward data, backward filter) of each algorithm that applies (conv3x3
only to stride 1; gemm with a workspace that holds the whole batch; direct with none) is
timed on the same float32 arrays, fastest of --repeats runs after one that may compile;
GFLOP/s counts 2 * N * O * OH * OW * C * 9 floating-point operations a pass. For a yardstick
the script also times OpenBLAS's sgemm on one thread (1024 x 1024 x 1024): this machine's
peak is about that figure times the number of cores. The last line is the JSON.
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
from train import emit_json  # noqa: E402

RESNET20 = ["32,16,32,16,1", "32,32,16,32,1", "32,64,8,64,1", "32,16,32,32,2", "32,32,16,64,2"]
WIDER = ["8,256,8,256,1", "4,512,4,512,1"]


def shape(text):
    """(N, C, H, O, S) from "N,C,H,O,S", each a positive integer (argparse's type: a bad one is
    a one-line error naming the flag)."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 5 or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give N,C,H,O,S (batch, channels, height, filters, stride), positive "
            "integers, e.g. 32,16,32,16,1"
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


def passes(n, c, h, o, s, rng):
    """{algorithm: {pass: function}} for the shape, on fresh arrays."""
    x = rng.standard_normal((n, c, h, h), dtype=np.float32)
    w = rng.standard_normal((o, c, 3, 3), dtype=np.float32)
    _, _, oh, ow = sizes.conv2d_output_shape(n, c, h, h, o, 3, 3, s, s, 1, 1)
    dy = rng.standard_normal((n, o, oh, ow), dtype=np.float32)
    y, dx, dw = np.empty_like(dy), np.empty_like(x), np.empty_like(w)
    gemm_ws = np.empty(
        n * sizes.conv2d_gemm_workspace_per_sample(c, h, h, o, 3, 3, s, s, 1, 1), x.dtype
    )
    runs = {
        "gemm": {
            "forward": lambda: K.conv2d_forward_gemm(y, x, w, gemm_ws, s, s, 1, 1),
            "backward data": lambda: K.conv2d_backward_data_gemm(dx, dy, w, gemm_ws, s, s, 1, 1),
            "backward filter": lambda: K.conv2d_backward_filter_gemm(
                dw, dy, x, gemm_ws, s, s, 1, 1
            ),
        },
        "direct": {
            "forward": lambda: K.conv2d_forward_direct(y, x, w, s, s, 1, 1),
            "backward data": lambda: K.conv2d_backward_data_direct(dx, dy, w, s, s, 1, 1),
            "backward filter": lambda: K.conv2d_backward_filter_direct(dw, dy, x, s, s, 1, 1),
        },
    }
    if sizes.conv3x3_applies(3, 3, s, s, 1, 1):
        ws = np.empty(n * sizes.conv3x3_workspace_per_sample(c, o, h, h), x.dtype)
        runs["conv3x3"] = {
            "forward": lambda: K.conv3x3_forward(y, x, w, ws),
            "backward data": lambda: K.conv3x3_backward_data(dx, dy, w, ws),
            "backward filter": lambda: K.conv3x3_backward_filter(dw, dy, x, ws),
        }
    return runs, 2.0 * n * o * oh * ow * c * 9


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
        default=[shape(text) for text in RESNET20 + WIDER],
        help="N,C,H,O,S each",
    )
    parser.add_argument("--repeats", type=positive_int, default=7)
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    peak = sgemm_one_thread(args.repeats)
    if peak is not None:
        print(f"OpenBLAS sgemm 1024^3 on one thread: {peak:.0f} GFLOP/s")
    results = []
    print(f"{'N,C,HxW,O,stride':22} {'algorithm':9} {'forward':>16} {'data':>16} {'filter':>16}")
    for n, c, h, o, s in args.shapes:
        runs, flop = passes(n, c, h, o, s, rng)
        for algorithm, fns in runs.items():
            row = {"shape": [n, c, h, o, s], "algorithm": algorithm}
            cells = []
            for name, fn in fns.items():
                seconds = fastest(fn, args.repeats)
                row[name] = {"ms": seconds * 1e3, "gflops": flop / seconds / 1e9}
                cells.append(f"{seconds * 1e3:6.2f} ms {flop / seconds / 1e9:4.0f} GF")
            results.append(row)
            print(f"{f'{n},{c},{h}x{h},{o},{s}':22} {algorithm:9} " + " ".join(cells), flush=True)
    emit_json({"sgemm_one_thread_gflops": peak, "passes": results}, args.json)


if __name__ == "__main__":
    main()
