"""An offloading step captured as one CUDA graph, copy stream included, against the same step
replayed call by call: the same numbers, and its transfers still measured.

    python bench/gpu_capture.py [--steps 5] [--json out.json]

ResNet-20, batch 32, 3x32x32, graph mode, SGD, offload="all" (asynchronous), trained twice on
a new CUDA device each time, with the same seed and the same `--steps` random batches:
``dev.use_cuda_graphs = False`` (every replay call by call) and True (the second replay is
captured, copy stream included, and every later one is one graph launch). Printed: each
step's seconds (the host waits for the GPU after every step: dev.Sync()), the losses as
hexadecimal floats, whether the two runs' losses and final states are bit-identical, the last
step's offload.* figures from memory_stats() for both, and whether a capture warning ("cannot
be captured as a CUDA graph") was raised. Exit status 0 when the losses and states are
identical, the graph was captured and no warning came; 1 otherwise; 2 (one line on stderr)
on Numba's CUDA simulator or without a GPU.
"""

import argparse
import os
import sys
import time
import warnings

import numpy as np
from train import CASES, LR, MOMENTUM, WEIGHT_DECAY, emit_json

from nnmem import device, opt, tensor
from nnmem.cli.arguments import output_file, positive_int
from nnmem.models import create_model

CASE = CASES["resnet20"]
#: The device pool: ResNet-20 at batch 32 needs far less; the host pool (pinned) is 4x it.
POOL_BYTES = "1GiB"
CAPTURE_WARNING = "cannot be captured as a CUDA graph"

warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")


def refusal():
    """Why this check cannot run here (a line), or None."""
    from numba import config

    if config.ENABLE_CUDASIM:
        return (
            "refusing to run on Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM is set): it has "
            "no CUDA graphs; unset it on a machine with a GPU"
        )
    try:
        device.create_cuda_gpu("16MiB")
    except device.DeviceUnavailable as e:
        return str(e)
    return None


def train(use_graphs, steps, case=CASE, seed=0):
    """Train `steps` steps with offload="all" on a new CUDA device; returns the losses, the
    final states, each step's seconds, the last step's offload.* figures, whether the step
    was captured and the capture warnings raised."""
    dev = device.create_cuda_gpu(os.environ.get("NNMEM_POOL_BYTES", POOL_BYTES))
    dev.use_cuda_graphs = use_graphs
    dev.SetRandSeed(seed)
    model = create_model(case["model"], num_classes=10, **case["kwargs"])
    model.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY))
    batch = case["batch"]
    tx = tensor.PlaceHolder((batch,) + case["shape"], dev)
    ty = tensor.PlaceHolder((batch,), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True, offload="all", async_offload=True)
    rng = np.random.default_rng(seed)
    losses, seconds = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            tx.copy_from_numpy(rng.random(tx.shape, dtype=np.float32))
            ty.copy_from_numpy(rng.integers(0, 10, batch).astype(np.int32))
            start = time.perf_counter()
            _, loss = model(tx, ty)
            dev.Sync()
            seconds.append(time.perf_counter() - start)
            losses.append(float(tensor.to_numpy(loss)[0]))
    step = model.compiled_step(tx, ty)
    stats = dev.memory_stats()
    return {
        "losses": losses,
        "states": {k: tensor.to_numpy(v) for k, v in model.get_states().items()},
        "step_seconds": seconds,
        "offload": {k: v for k, v in stats.items() if k.startswith("offload.")},
        # the device's record of the step's graph (None: its capture failed)
        "captured": dev._captured.get(step) is not None,
        "capture_warnings": [str(w.message) for w in caught if CAPTURE_WARNING in str(w.message)],
    }


def compare(plain, graphs):
    """Are the two runs' losses and final states the same, bit for bit?"""
    same_losses = [np.float64(a).tobytes() for a in plain["losses"]] == [
        np.float64(b).tobytes() for b in graphs["losses"]
    ]
    same_states = plain["states"].keys() == graphs["states"].keys() and all(
        np.array_equal(plain["states"][k], graphs["states"][k]) for k in plain["states"]
    )
    return same_losses, same_states


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive_int, default=5, help="training steps per run")
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps: at least 3 (the second replay is captured, the third relaunches)")
    why = refusal()
    if why is not None:
        print(f"bench/gpu_capture.py: {why}", file=sys.stderr)
        sys.exit(2)
    from numba import cuda

    gpu = cuda.get_current_device().name
    gpu = gpu.decode() if isinstance(gpu, bytes) else str(gpu)
    runs = {"uncaptured": train(False, args.steps), "captured": train(True, args.steps)}
    same_losses, same_states = compare(runs["uncaptured"], runs["captured"])
    print(f"{gpu}: ResNet-20, batch {CASE['batch']}, offload='all' (async), {args.steps} steps\n")
    for name, r in runs.items():
        times = " ".join(f"{s * 1e3:8.1f}" for s in r["step_seconds"])
        print(f"{name:10} ms/step: {times}")
        print(f"{'':10} losses:  {' '.join(float(x).hex() for x in r['losses'])}")
        figures = r["offload"]
        print(
            f"{'':10} offload: {figures.get('offload.tensors')} tensors, transfer "
            f"{figures.get('offload.transfer_seconds', 0) * 1e3:.2f} ms, stall "
            f"{figures.get('offload.stall_seconds', 0) * 1e3:.2f} ms, overlap "
            f"{figures.get('offload.overlap', 0):.3f}"
        )
    captured = runs["captured"]
    ok = same_losses and same_states and captured["captured"] and not captured["capture_warnings"]
    print(f"\nlosses identical: {same_losses}; final states identical: {same_states}")
    print(f"captured: {captured['captured']}; capture warnings: {captured['capture_warnings']}")
    print(f"{'PASS' if ok else 'FAIL'} offloading step captured as one CUDA graph, bit-identical")
    for r in runs.values():
        del r["states"]
    emit_json(
        {
            "gpu": gpu,
            "steps": args.steps,
            "losses_identical": same_losses,
            "states_identical": same_states,
            "pass": ok,
            **runs,
        },
        args.json,
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
