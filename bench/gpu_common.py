"""What the GPU benchmarks share (gpu.py, gpu_offload.py, gpu_capacity.py, gpu_graphs.py; run
together by device_check.sh): the refusal without a GPU, the device (or the CPU in --smoke),
results saved after every figure, PASS/FAIL lines, timed steps and batches found by planning.

--smoke runs a script's every code path on the CPU device with tiny shapes, so that it can be
tested on a machine without a GPU; its figures mean nothing. GPU time is scarce: a script run
there must not fail on a path that was never run.
"""

import gc
import json
import os
import statistics
import time

import numpy as np

from nnmem import device, layer, opt, tensor
from nnmem.memory import format_bytes

#: The pool of a --smoke run's CPU device (and the "GPU" its batch searches plan against).
SMOKE_POOL_BYTES = 256 * 2**20


def refusal(smoke, torch_needed=True):
    """Why a GPU benchmark cannot run here (one line), or None. --smoke runs anywhere."""
    if smoke:
        return None
    from numba import config

    if config.ENABLE_CUDASIM:
        return (
            "refusing to run on Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM is set): its "
            "timings and memory figures mean nothing; unset it on a machine with a GPU, or "
            "pass --smoke to run the code paths on the CPU"
        )
    try:
        device.create_cuda_gpu("16MiB")
    except device.DeviceUnavailable as e:
        return f"{e} (--smoke runs the code paths on the CPU)"
    if not torch_needed:
        return None
    try:
        import torch
    except ImportError:
        return "PyTorch is the yardstick and is not installed: pip install torch"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA GPU: pip install torch (a CUDA build)"
    return None


def make_device(smoke, pool_bytes=None, link_gbps=None):
    """The CUDA device (pool: `pool_bytes`, default most of the GPU), or with --smoke a CPU
    device whose copies to host memory go at `link_gbps` (so that offloading has a link to
    hide)."""
    if smoke:
        return device.create_cpu_device(pool_bytes or SMOKE_POOL_BYTES, link_gbps=link_gbps)
    return device.create_cuda_gpu(pool_bytes)


def gpu_pool_bytes(smoke):
    """The pool a CUDA device takes by default: the GPU's free memory but 1 GiB."""
    if smoke:
        return SMOKE_POOL_BYTES
    from nnmem.devices.cuda import default_pool_bytes

    return default_pool_bytes()


def release_gpu(smoke):
    """Give the memory of dead devices back to the driver now. Numba frees a device array
    late (its deallocations wait in a queue), and the next device's pool may need the bytes."""
    gc.collect()
    if not smoke:
        from numba import cuda

        cuda.current_context().deallocations.clear()


def use_conv_algorithm(model, algorithm):
    """Set every Conv2d layer of `model` (before compile) to `algorithm`. The large-batch parts
    use "gemm", the GPU's first candidate, which "auto" keeps unless another is 20% faster:
    "auto" times every candidate on the whole batch the first time a shape runs (direct
    included, seven runs each), tens of seconds per new batch on ResNet-50 at 224x224."""
    todo = [model]
    while todo:
        each = todo.pop()
        if isinstance(each, layer.Conv2d):
            each.algorithm = algorithm
        todo.extend(vars(each).get("_layers", {}).values())
    return model


class Results(dict):
    """A benchmark's figures, written to `path` (when given) after every update: a part
    killed by its time limit keeps what it had measured."""

    def __init__(self, path, **figures):
        super().__init__(figures)
        self.path = path
        self.failed = []
        self.save()

    def put(self, key, value):
        self[key] = value
        self.save()
        return value

    def check(self, label, passed, detail=""):
        """Print a PASS/FAIL line and record it (results["checks"])."""
        print(
            f"{'PASS' if passed else 'FAIL'} {label}{': ' + detail if detail else ''}", flush=True
        )
        self.setdefault("checks", {})[label] = bool(passed)
        if not passed:
            self.failed.append(label)
        self.save()

    def save(self):
        if self.path:
            partial = self.path + ".partial"
            with open(partial, "w") as f:
                json.dump(self, f, sort_keys=True, default=str)
                f.write("\n")
            os.replace(partial, self.path)  # a reader never sees half a file


def count_launches(dev):
    """A dict counting the replays `dev` ran as captured CUDA graphs ("captured") and call by
    call ("uncaptured"), kept up to date by wrapping the device's captured_replay."""
    counts = {"captured": 0, "uncaptured": 0}
    inner = dev.captured_replay

    def counting(step, host_values):
        captured = inner(step, host_values)
        counts["captured" if captured is not None else "uncaptured"] += 1
        return captured

    dev.captured_replay = counting
    return counts


def build(make_model, shape, dev, seed=0, algorithm=None, lr=0.01, **options):
    """(model, tx, ty): a new model from `make_model()` with SGD (momentum 0.9), compiled in
    graph mode with `options` on `dev` from `seed`, and a fixed random batch of `shape`
    (class ids among 10) in its placeholders."""
    dev.SetRandSeed(seed)  # also sets the dropout counter back: every run draws the same masks
    model = make_model()
    if algorithm is not None:
        use_conv_algorithm(model, algorithm)
    model.set_optimizer(opt.SGD(lr=lr, momentum=0.9))
    tx = tensor.PlaceHolder(shape, dev)
    ty = tensor.PlaceHolder(shape[:1], dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True, **options)
    rng = np.random.default_rng(seed)
    tx.copy_from_numpy(rng.random(shape, dtype=np.float32))
    ty.copy_from_numpy(rng.integers(0, 10, shape[0]).astype(np.int32))
    return model, tx, ty


OFFLOAD_KEYS = ("transfer_seconds", "stall_seconds", "overlap", "bytes_to_host", "bytes_to_device")


def timed_steps(model, tx, ty, dev, steps):
    """Run `steps` steps; {"losses", "seconds" (each step's, the loss read back included),
    and each step's offload.* figures when it offloads}."""
    out = {"losses": [], "seconds": []}
    for _ in range(steps):
        start = time.perf_counter()
        _, loss = model(tx, ty)
        out["losses"].append(float(tensor.to_numpy(loss)[0]))  # waits for the step
        out["seconds"].append(time.perf_counter() - start)
        stats = dev.memory_stats()
        for key in OFFLOAD_KEYS:
            if f"offload.{key}" in stats:
                out.setdefault(key, []).append(stats[f"offload.{key}"])
    return out


def summary(run, warmup):
    """Medians over a timed_steps result's steps after the first `warmup`."""
    figures = {"step_seconds": statistics.median(run["seconds"][warmup:])}
    for key in OFFLOAD_KEYS:
        if key in run:
            figures[key] = statistics.median(run[key][warmup:])
    return figures


def planned_peaks(make_model, shape, smoke, algorithm=None, **options):
    """(device bytes, host bytes): the smallest pool and host pool in which two graph-mode
    training steps of `make_model()` on batches of `shape` fit, with compile `options`
    (offload, recompute, ...): the high-water marks of a planning device for the kind of
    device that will run it (nnmem.planning.smallest_pool's method, host pool included).
    Shapes alone: no kernel runs and no byte is used."""
    dev = device.create_planning_device(plans_for="cpu" if smoke else "cuda")
    model, tx, ty = build(make_model, shape, dev, algorithm=algorithm, **options)
    for _ in range(2):  # the first step makes the optimizer's state
        model(tx, ty)
    stats = dev.memory_stats()
    return stats["high_water_bytes"], stats["host.high_water_bytes"]


def largest_batch(fits, guess, cap):
    """The largest batch b in [1, cap] with fits(b) (monotone: true up to some b; 0 when not
    even 1 fits): galloping from `guess` until the answer is bracketed, then bisection."""
    lo, hi = 0, cap + 1  # fits(lo) holds (or lo is 0); fits(hi) does not (or hi is past cap)
    b, stride = min(max(guess, 1), cap), max(1, guess // 32)
    while lo + 1 < hi:
        if fits(b):
            lo, b = b, b + stride
        else:
            hi, b = b, b - stride
        stride *= 2
        if not lo < b < hi:
            break
    while lo + 1 < hi:
        middle = (lo + hi) // 2
        lo, hi = (middle, hi) if fits(middle) else (lo, middle)
    return lo


def affine_guess(peak_of, limit, small=8):
    """The batch at which peak_of(batch), taken as a line through batches `small` and
    2 * `small`, reaches `limit` (a step's memory is fixed bytes plus bytes per sample)."""
    a, b = peak_of(small), peak_of(2 * small)
    per_sample = max(1, (b - a) / small)
    return max(1, int(small + (limit - a) / per_sample))


def gib(n):
    return format_bytes(n) if n is not None else "-"


def gpu_name(smoke):
    """The GPU's name as its driver gives it ("CPU (--smoke)" with --smoke)."""
    if smoke:
        return "CPU (--smoke)"
    from numba import cuda

    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)
