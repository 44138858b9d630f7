"""Imported ONNX graphs planned at batch 32 from their shapes alone, beside the memory of
PyTorch's training step on the same architectures.

    python bench/onnx_plans.py [--json out.json] [--no-torch] [--no-optimal]

1. Plans. onnx's light ResNet-50, DenseNet-121, Inception v2 and VGG-19 (the onnx wheel's
   backend test data, weights made by ConstantOfShape) at 32x3x224x224, and BERT-base
   (sequence 128) and GPT-2 small (sequence 1024) from nnmem.sonnx.architectures at 32 x
   sequence, weights absent (sonnx.load(path, load_external_data=False): a plan reads shapes
   only), planned by nnmem.planning.plan(SONNXModel(proto), shape) with every technique, and
   for the CNNs memory="optimal" at 16 and 8 GiB. Timed: each plan() call, and 3 imports of
   each light model, sonnx.prepare(sonnx.load(path)) (the first also imports onnx's reference
   operators). Floors: every plan() under 30 s, every import under 2 s.
2. Beside PyTorch, a yardstick (skipped, and said so, without torch): the same training step
   on both sides (forward, softmax cross-entropy, backward, SGD with momentum 0.9), and the
   most bytes it holds at once beyond what lives across steps (parameters and running
   statistics, momentum, the batch and labels) and its results (the logits and the loss).
   nnmem: the liveness plan's peak minus StepPlan.persistent_bytes, which counts exactly those,
   i.e. its arena (activations and their gradients, the weight gradients until the update,
   workspaces). PyTorch (torch_models.step_memory): the CPU allocator's live bytes at their
   peak, from the profiler's [memory] events, the gradients set to None before the step (its
   weight gradients are counted, as nnmem's) and the momentum made by a warm-up step.
   torchvision's resnet50, densenet121, vgg19 and googlenet (no Inception v2 there: GoogLeNet,
   Inception v1 with BatchNorm, a different network, printed and not floored); BERT and GPT-2
   written in bench/torch_models.py operator for operator as the ONNX graphs. At batch 32,
   but GPT-2 (about 68 GiB there): at batches 1 and 2, read at 32 on the line through them.
   A peak, a maximum of lines in b, is convex: that line under-estimates it (VGG-19: 2.78 GiB
   from batches 2 and 4, 2.87 measured at 32), so the ratio it gives is an upper bound.
   Floor: nnmem / PyTorch <= 1 for the same architectures. Also printed: the bytes autograd
   saves for backward (saved_tensors_hooks) beside nnmem's host bytes of liveness + offload
   (what its backward reads); where nnmem holds more, why, and its live bytes at its peak.
GiB: 2**30 bytes. Exit status 1 on a FAIL; the last line is the JSON.
"""

import argparse
import os
import platform
import sys
import tempfile
import time
import types
from typing import NamedTuple

import onnx
from train import emit_json

from nnmem import sonnx
from nnmem.cli.arguments import output_file
from nnmem.graph.optimal import NoPlanFits
from nnmem.planning import plan
from nnmem.sonnx import architectures

GIB = 2**30
BATCH = 32
#: The batches PyTorch's step is measured at: BATCH, or two small ones read at BATCH on the
#: line through them (GPT-2: its step at batch 32 holds 68 GiB by that line, this machine has 24).
AT_BATCH, FITTED = (BATCH,), (1, 2)
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


class Net(NamedTuple):
    title: str
    source: object  # a light model's file name, or an architectures builder
    sequence: object  # a builder's sequence length; None for a light model (224x224 images)
    torch_name: str  # in torchvision.models (light models) or bench/torch_models.py
    torch_batches: tuple  # the batches PyTorch is measured at: BATCH, or two fitted to a line
    same: bool  # PyTorch's model is the graph's architecture (else printed, not floored)
    differs: str  # what differs between the two
    gap: str = ""  # where nnmem holds more than PyTorch (found with plan(..., tensors=True))


#: Why nnmem holds more of DenseNet-121 and Inception v2: a graph of theirs, not nnmem.
SCALE = (
    "the graph's Mul and Add after each BatchNorm (caffe's Scale) keep each BatchNorm's "
    "output for the Mul's gradient, a third tensor per BatchNorm beside its input and the "
    "ReLU's output, where torchvision's BatchNorm2d does the affine itself and keeps two: "
    "the BatchNorm2d (forward) group below"
)
MODELS = {
    "resnet50": Net("ResNet-50", "light_resnet50.onnx", None, "resnet50", AT_BATCH, True,
                    "caffe2's v1 (stride in the first 1x1) beside torchvision's v1.5 (in the "
                    "3x3)"),
    "densenet121": Net("DenseNet-121", "light_densenet121.onnx", None, "densenet121", AT_BATCH,
                       True, "the graph has a Mul and an Add (caffe's Scale) after each "
                       "BatchNorm and a 1x1-Conv classifier", SCALE),
    "inception_v2": Net("Inception v2", "light_inception_v2.onnx", None, "googlenet", AT_BATCH,
                        False, "torchvision has no Inception v2: GoogLeNet (v1 with "
                        "BatchNorm, no aux heads), a different network; the graph has a Mul "
                        "and an Add after each BatchNorm", SCALE),
    "vgg19": Net("VGG-19", "light_vgg19.onnx", None, "vgg19", AT_BATCH, True, "same layers",
                 "each Gemm has transB=1 and nnmem's gemm (nnmem/ops/composite.py) copies the "
                 "weight's transpose (0.46 GiB for the three, made at the step's start, kept "
                 "until their backward) and writes the weight's gradient twice, the Matmul's "
                 "(25088, 4096) then the Transpose's (4096, 25088), both live at the peak (0.77 "
                 "GiB); PyTorch's Linear reads a transposed view and writes the gradient once. "
                 "Without those copies nnmem's live bytes peak at 2.65 GiB"),
    "bert": Net("BERT-base", architectures.bert, 128, "Bert", AT_BATCH, True,
                "the ONNX graph operator for operator"),
    "gpt2": Net("GPT-2 small", architectures.gpt2, 1024, "GPT2", FITTED, True,
                "the ONNX graph operator for operator"),
}  # fmt: skip
BUDGETS_GIB = (16, 8)
PLAN_S, IMPORT_S = 30.0, 2.0  # the floors, seconds


def machine():
    """One line naming this machine: CPU model, cores, memory."""
    model = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        model = names[0] if names else model
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    return f"{model}, {platform.machine()}, {os.cpu_count()} CPUs, {memory:.0f} GiB"


# -- 1. nnmem's plans ---------------------------------------------------------------------------
def graph_of(key, folder, imports=3):
    """(the ModelProto to plan, the input shape, the seconds of `imports` imports or None)."""
    source, sequence = MODELS[key].source, MODELS[key].sequence
    if sequence is None:
        path = os.path.join(LIGHT, source)
        seconds = []
        for _ in range(imports):
            start = time.perf_counter()
            sonnx.prepare(sonnx.load(path))
            seconds.append(time.perf_counter() - start)
        return sonnx.load(path), (BATCH, 3, 224, 224), seconds
    path = os.path.join(folder, f"{key}.onnx")
    architectures.save_without_weights(source(sequence=sequence), path)
    return sonnx.load(path, load_external_data=False), (BATCH, sequence), None


def technique_row(t):
    return {
        "peak_bytes": t.peak_bytes,
        "host_bytes": t.host_bytes,
        "recomputations": t.recomputations,
        "peak_at": t.peak_operation,
    }


def plan_model(key, proto, shape, optimal):
    """Every technique's plan of `proto`, and the optimal plan at each budget when `optimal`."""
    start = time.perf_counter()
    planned = plan(sonnx.SONNXModel(proto), shape)
    row = {
        "plan_s": time.perf_counter() - start,
        "persistent_bytes": planned.persistent_bytes,
        "recorded_operations": planned.nodes,
        "techniques": {t.technique: technique_row(t) for t in planned.techniques},
        "optimal": {},
    }
    for gib in BUDGETS_GIB if optimal else ():
        start = time.perf_counter()
        try:
            found = plan(sonnx.SONNXModel(proto), shape, memory="optimal", budget=gib * GIB)
        except NoPlanFits as error:
            result = {"fits": False, "smallest_bytes": error.smallest, "proven": error.proven}
        else:
            decided = found.techniques[-1].optimal
            result = {
                "fits": True,
                "pool_bytes": decided.pool_bytes,
                "predicted_s": decided.predicted_seconds,
                "status": decided.status,
                "gap": decided.gap,
                "source": decided.source,
                "recomputed": len(decided.decisions.recompute),
                "offloaded": len(decided.decisions.offload),
            }
        result["plan_s"] = time.perf_counter() - start  # the heuristics again, then the solver
        row["optimal"][f"{gib} GiB"] = result
    return row


# -- 2. PyTorch's step ---------------------------------------------------------------------------
def load_torch():
    """(torch, torchvision, torch_models), or the reason PyTorch is skipped."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    try:
        import torchvision
    except (RuntimeError, OSError):
        # A torchvision wheel built for CUDA cannot load its C operators beside a CPU build of
        # torch, and fails registering their fake kernels; its models need none of them.
        for name in [n for n in sys.modules if n.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("skipped")
        import torchvision
    import torch_models

    torch.set_num_threads(os.cpu_count())
    return torch, torchvision, torch_models


def torch_row(modules, key, shape):
    """PyTorch's step on the architecture of MODELS[key] (torch_models.step_memory), at
    BATCH or fitted to a line through two batches and read at BATCH."""
    torch, torchvision, torch_models = modules
    spec = MODELS[key]
    sequence, name, batches = spec.sequence, spec.torch_name, spec.torch_batches
    torch.manual_seed(0)
    if sequence is None:
        options = {"aux_logits": False, "init_weights": False} if name == "googlenet" else {}
        net = getattr(torchvision.models, name)(**options)
        x, y = torch.randn(max(batches), *shape[1:]), torch.randint(0, 1000, (max(batches),))
    else:
        net = getattr(torch_models, name)()
        x = torch.randint(0, 1000, (max(batches), sequence))
        y = torch.randint(0, 1000, (max(batches), sequence))
    start = time.perf_counter()
    measured = torch_models.step_memory(net, x, y, batches)
    return {
        "model": f"torchvision.models.{name}" if sequence is None else f"torch_models.{name}",
        "same_architecture": spec.same,
        "differs": spec.differs,
        "measured": measured,
        "peak_bytes": at_batch([(m["batch"], m["peak_bytes"]) for m in measured]),
        "saved_bytes": at_batch([(m["batch"], m["saved"]["activations"]) for m in measured]),
        "seconds": time.perf_counter() - start,
    }


def at_batch(points):
    """The value at BATCH: measured there, or on the line through two (batch, value)s."""
    if len(points) == 1:
        return points[0][1]
    (b1, v1), (b2, v2) = points
    return v1 + (v2 - v1) / (b2 - b1) * (BATCH - b1)


def peak_groups(proto, shape, top=5):
    """What nnmem holds at its liveness plan's peak: the tensors live there grouped by the
    operator and phase that make them, [(bytes, "operator (phase)", count)], the `top` largest
    groups."""
    planned = plan(sonnx.SONNXModel(proto), shape, offload="none", tensors=True)
    liveness = next(t for t in planned.techniques if t.technique == "liveness")
    rows, position = liveness.timeline.tensors, liveness.peak_position
    groups = {}
    for name, _, nbytes, _, first, last, _ in rows["tensors"]:
        if first <= position <= last:
            group = f"{name.split()[0]} ({rows['phases'][first]})"
            total, count = groups.get(group, (0, 0))
            groups[group] = (total + nbytes, count + 1)
    largest = sorted(groups.items(), key=lambda item: -item[1][0])[:top]
    return [(nbytes, group, count) for group, (nbytes, count) in largest]


# -- the tables ----------------------------------------------------------------------------------
def print_plans(rows):
    print(f"\n1. Plans at batch {BATCH}, from the graphs alone (GiB; plan s: one plan() call)")
    names = list(next(iter(rows.values()))["techniques"])
    print(
        f"  {'model':13} {'persist':>7} "
        + " ".join(f"{n[:14]:>14}" for n in names)
        + f" {'host':>6} {'plan s':>6} {'import s':>10}"
    )
    for key, row in rows.items():
        techniques = row["techniques"]
        seconds = row["import_s"]
        imported = "-" if seconds is None else f"{seconds[0]:.2f}/{min(seconds):.2f}"
        print(
            f"  {MODELS[key].title:13} {row['persistent_bytes'] / GIB:7.2f} "
            + " ".join(f"{techniques[n]['peak_bytes'] / GIB:14.2f}" for n in names)
            + f" {techniques['all three']['host_bytes'] / GIB:6.2f} {row['plan_s']:6.1f}"
            f" {imported:>10}"
        )
    print("  persist: parameters, momentum, batch, results; host: what all three moves to host")
    print("  memory; import: sonnx.prepare(sonnx.load(path)), first/best of 3 (BERT and GPT-2")
    print("  are built, not imported: weights absent)")
    print(f"  optimal (memory='optimal') at {', '.join(f'{b} GiB' for b in BUDGETS_GIB)}:")
    for key, row in rows.items():
        for budget, found in row["optimal"].items():
            if not found["fits"]:
                print(
                    f"    {MODELS[key].title:13} {budget:>6}: NoPlanFits, smallest "
                    f"{found['smallest_bytes'] / GIB:.2f} GiB ({found['plan_s']:.1f} s)"
                )
                continue
            pool = found["pool_bytes"] / GIB
            print(
                f"    {MODELS[key].title:13} {budget:>6}: pool {pool:.2f} GiB, "
                f"{found['recomputed']} recomputed, {found['offloaded']} offloaded, predicted "
                f"{found['predicted_s']:.2f} s (flop model), {found['status']}, from "
                f"{found['source']}; {found['plan_s']:.1f} s"
            )


def print_torch(rows):
    print(
        f"\n2. One training step beside PyTorch's (GiB at batch {BATCH}): the most bytes held at "
        "once beyond\n   parameters, momentum, batch, logits and loss (peak); and the "
        "activations kept for backward\n   (nnmem: what liveness + offload moves to host; "
        "PyTorch: saved_tensors_hooks)"
    )
    print(
        f"  {'model':13} {'nnmem':>6} {'PyTorch':>7} {'ratio':>6} {'nnmem':>7} {'PyTorch':>7}  "
        "PyTorch model, batches measured"
    )
    print(f"  {'':13} {'peak':>6} {'peak':>7} {'':6} {'kept':>7} {'saved':>7}")
    for key, row in rows.items():
        theirs = row["torch"]
        measured = theirs["measured"]
        batches = ", ".join(f"{m['batch']}: {m['peak_bytes'] / GIB:.3f}" for m in measured)
        print(
            f"  {MODELS[key].title:13} {row['activations_bytes'] / GIB:6.2f} "
            f"{theirs['peak_bytes'] / GIB:7.2f} {row['ratio']:6.3f} "
            f"{row['techniques']['liveness + offload']['host_bytes'] / GIB:7.2f} "
            f"{theirs['saved_bytes'] / GIB:7.2f}  {theirs['model']}, peak at batch {batches}"
            + (f", read at {BATCH} on their line" if len(measured) > 1 else "")
        )
        print(f"  {'':13} differs: {theirs['differs']}")
        ours = row["techniques"]["liveness"]["peak_at"]
        print(f"  {'':13} peaks: nnmem at {ours}; PyTorch in the {measured[-1]['peak_at']}")
        if "largest" in row:
            print(f"  {'':13} nnmem holds more: {MODELS[key].gap}")
            held = "; ".join(f"{g} {n / GIB:.2f} ({c})" for n, g, c in row["largest"])
            print(f"  {'':13} live at nnmem's peak, GiB (tensors): {held}")


def check(floors, passed, what):
    line = f"{'PASS' if passed else 'FAIL'}: {what}"
    floors.append(line)
    print(f"  {line}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch column")
    parser.add_argument("--no-optimal", action="store_true", help="skip memory='optimal'")
    args = parser.parse_args()
    results = {"machine": machine(), "batch": BATCH, "models": {}}
    print(f"ONNX graphs planned on {results['machine']}")
    rows = results["models"]
    with tempfile.TemporaryDirectory() as folder:
        for key in MODELS:
            proto, shape, import_s = graph_of(key, folder)
            cnn = MODELS[key].sequence is None
            rows[key] = {"input_shape": list(shape), "import_s": import_s}
            rows[key].update(plan_model(key, proto, shape, cnn and not args.no_optimal))
            liveness = rows[key]["techniques"]["liveness"]["peak_bytes"]
            rows[key]["activations_bytes"] = liveness - rows[key]["persistent_bytes"]
            print(f"  planned {MODELS[key].title} in {rows[key]['plan_s']:.1f} s", flush=True)
    print_plans(rows)
    modules = "--no-torch given" if args.no_torch else load_torch()
    if isinstance(modules, str):
        results["torch"] = f"skipped: {modules}"
        print(f"\n2. The PyTorch column is skipped: {modules}")
    else:
        results["torch"] = modules[0].__version__
        with tempfile.TemporaryDirectory() as folder:
            for key, row in rows.items():
                row["torch"] = torch_row(modules, key, row["input_shape"])
                row["ratio"] = row["activations_bytes"] / row["torch"]["peak_bytes"]
                if row["ratio"] > 1:
                    proto, shape, _ = graph_of(key, folder, imports=0)
                    row["largest"] = peak_groups(proto, shape)
                print(f"  measured PyTorch's {row['torch']['model']}", flush=True)
        print_torch(rows)
    print("\nFloors")
    floors = []
    for key, row in rows.items():
        title = MODELS[key].title
        plan_s = max([row["plan_s"]] + [o["plan_s"] for o in row["optimal"].values()])
        check(floors, plan_s < PLAN_S, f"{title}: every plan() {plan_s:.1f} s < {PLAN_S:g} s")
        if row["import_s"] is not None:  # every import, the first (cold) one included
            import_s = max(row["import_s"])
            check(floors, import_s < IMPORT_S, f"{title}: import {import_s:.2f} s < {IMPORT_S:g} s")
        if "torch" in row and row["torch"]["same_architecture"]:
            ratio = row["ratio"]
            check(floors, ratio <= 1, f"{title}: nnmem's step peak / PyTorch's {ratio:.3f} <= 1")
    results["floors"] = floors
    emit_json(results, args.json)
    return 1 if any(line.startswith("FAIL") for line in floors) else 0


if __name__ == "__main__":
    sys.exit(main())
