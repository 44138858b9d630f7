"""Bit fingerprints of short training runs: compare two versions of nnmem byte for byte.

    python bench/fingerprint.py [--algorithm gemm|auto] [--steps 4] [--json out.json]

Trains the seed CNN (batch 8, 1x28x28), ResNet-20 and DenseNet (batch 4, 3x16x16) for a few
SGD steps on fixed random data, eagerly and in graph mode with each memory technique
(recompute="memory", recompute="cost-aware", offload="all"), and prints, per run, every loss
as a hexadecimal float and a SHA-256 of the final states (names, then bytes). Run it on two
versions (a refactor and the commit before, say) and compare the JSON: a change that keeps
the numbers gives equal fingerprints. Within one version every technique's fingerprint
equals the eager one's (printed as "same as eager").

--algorithm gemm (the default) fixes every convolution's algorithm, so that two processes
compute the same bits; "auto" keeps Conv2d's timed choice, whose last bits may differ between
processes when the timings choose differently (README, "What works").
"""

import argparse
import hashlib

import numpy as np
from train import emit_json

from nnmem import device, layer, opt, tensor
from nnmem.cli.arguments import output_file, positive_int
from nnmem.models import create_model

MODELS = {  # name -> (zoo name, keyword arguments, input shape)
    "cnn": ("cnn", {}, (8, 1, 28, 28)),
    "resnet20": ("resnet", {"depth": 20}, (4, 3, 16, 16)),
    "densenet": ("densenet", {}, (4, 3, 16, 16)),
}
TECHNIQUES = {  # name -> (use_graph, compile options)
    "eager": (False, {}),
    "graph": (True, {}),
    "recompute": (True, {"recompute": "memory"}),
    "cost-aware": (True, {"recompute": "cost-aware"}),
    "offload": (True, {"offload": "all"}),
}


def sublayers(root):
    """Every layer under `root`, itself included (each once)."""
    found, stack = {}, [root]
    while stack:
        current = stack.pop()
        if id(current) not in found:
            found[id(current)] = current
            stack.extend(current._layers.values())
    return found.values()


def fingerprint(model_name, technique, algorithm, steps):
    """{"losses": [hex floats], "states": sha256} of one short training run."""
    zoo_name, kwargs, shape = MODELS[model_name]
    use_graph, options = TECHNIQUES[technique]
    model = create_model(zoo_name, **kwargs)
    if algorithm != "auto":
        for sub in sublayers(model):
            if isinstance(sub, layer.Conv2d):
                sub.algorithm = algorithm
    rng = np.random.default_rng(0)
    data = [
        (rng.random(shape, dtype=np.float32), rng.integers(0, 10, shape[0]).astype(np.int32))
        for _ in range(steps)
    ]
    dev = device.create_cpu_device("256MiB")
    dev.SetRandSeed(0)
    model.set_optimizer(opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    tx = tensor.PlaceHolder(shape, dev)
    ty = tensor.PlaceHolder((shape[0],), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=use_graph, **options)
    losses = []
    for x, y in data:
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        _, loss = model(tx, ty)
        losses.append(float(tensor.to_numpy(loss)[0]).hex())
    digest = hashlib.sha256()
    for name, value in sorted(model.get_states().items()):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(tensor.to_numpy(value)).tobytes())
    return {"losses": losses, "states": digest.hexdigest()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithm", choices=["gemm", "direct", "auto"], default="gemm")
    parser.add_argument("--steps", type=positive_int, default=4, help="training steps per run")
    parser.add_argument("--json", type=output_file, help="also write the JSON to this file")
    args = parser.parse_args()
    results = {}
    for model_name in MODELS:
        for technique in TECHNIQUES:
            got = fingerprint(model_name, technique, args.algorithm, args.steps)
            results[f"{model_name}/{technique}"] = got
            eager = results[f"{model_name}/eager"]
            same = "same as eager" if got == eager else "DIFFERS from eager"
            print(f"{model_name:9} {technique:11} {got['states'][:16]}  last loss "
                  f"{got['losses'][-1]}  {same if technique != 'eager' else ''}")  # fmt: skip
    emit_json(results, args.json)


if __name__ == "__main__":
    main()
