"""What SINGA's operator-level contract costs in memory: one training step of the zoo's models.

SINGA's contract: while training, an operation on a tensor that requires a gradient records its
creator, and `y.creator.backward(dy)` gives every input's gradient. SINGA's `from_numpy` tensors
require a gradient; nnmem's placeholders do not. So a step fed from_numpy tensors records and
saves on the input side what a step fed placeholders does not, and autograd.backward sends
gradients only where they reach a parameter in both. This prints, per model, the step's peak:
without recycling, eager with placeholders, eager with from_numpy inputs, and the compiled plan;
and one JSON object. The contract costs nothing when "eager, from_numpy" equals "eager".

    python bench/operator_contract.py [--batch 8] [--json out.json]
"""

import argparse

import numpy as np
from train import emit_json

from nnmem import device, opt, tensor
from nnmem.cli.arguments import output_file, positive_int
from nnmem.measure import measure_step
from nnmem.memory.timeline import Timeline
from nnmem.models import create_model

CASES = [
    ("cnn", {}, (1, 28, 28)),
    ("mlp", {}, (784,)),
    ("resnet", {"depth": 8}, (3, 32, 32)),
    ("densenet", {"layers_per_block": 2}, (3, 32, 32)),
    ("inception", {"modules": 2}, (3, 32, 32)),
]


def eager_peak_from_numpy(name, kwargs, x, y):
    """The peak of one eager step (after a warm-up step) on SINGA-style from_numpy inputs."""
    dev = device.create_cpu_device(None, policy="best_fit")
    dev.SetRandSeed(0)
    model = create_model(name, **kwargs)
    model.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    tx, ty = tensor.from_numpy(x, dev), tensor.from_numpy(y, dev)
    model.compile([tx], is_train=True, use_graph=False)
    model(tx, ty)
    with dev.sampling_memory() as samples:
        model(tx, ty)
    return Timeline.from_samples("eager, from_numpy", samples).peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=positive_int, default=8)
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    rows = {}
    print(f"{'model':10s} {'no recycling':>13s} {'eager':>10s} {'from_numpy':>11s} {'graph':>10s}")
    for name, kwargs, shape in CASES:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((args.batch, *shape)).astype(np.float32)
        y = rng.integers(0, 10, args.batch).astype(np.int32)
        timelines, _ = measure_step(lambda: create_model(name, **kwargs), x, y)
        row = {label: int(t.peak) for label, t in timelines.items()}
        row["eager, from_numpy"] = int(eager_peak_from_numpy(name, kwargs, x, y))
        rows[name] = row
        print(
            f"{name:10s} {row['no recycling']:13,d} {row['eager']:10,d} "
            f"{row['eager, from_numpy']:11,d} {row['graph']:10,d}"
        )
    same = all(r["eager, from_numpy"] == r["eager"] for r in rows.values())
    print("the contract costs no byte:", same)
    emit_json({"batch": args.batch, "peak_bytes": rows, "costs_nothing": same}, args.json)


if __name__ == "__main__":
    main()
