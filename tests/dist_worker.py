"""The program tests/test_dist.py runs on 2 ranks: ``mpiexec -n 2 python dist_worker.py MODE OUT``.

MODE "train": every configuration of CONFIGS trains STEPS steps of the SINGA CNN on its rank's
shard of one data set (batch BATCH per rank); each rank writes OUT/rank<r>.npz with the losses,
the final states and the bytes sent per configuration.
MODE "mismatch": rank 1 builds a wider model (the ranks must both fail, naming it).
MODE "dies": rank 1 raises before its first step, "dies-early" before it makes its DistOpt
(rank 0 must fail within the timeout); "stuck": rank 1 sleeps STUCK_S before its first step
(rank 0 fails within the timeout, and its abort at exit ends the job long before rank 1 wakes).
"""

import sys
import time

import numpy as np

from nnmem import device, layer, opt, tensor
from nnmem.communicator import DistributedError
from nnmem.data import shard
from nnmem.models.cnn import CNN

STEPS, BATCH, WORLD = 3, 8, 2
STUCK_S = 90
LR = dict(lr=0.05, momentum=0.9, weight_decay=1e-4)
#: name -> (compile options, dist_option, spars, threshold)
CONFIGS = {
    "eager": (dict(use_graph=False), "plain", None, None),
    "graph": (dict(use_graph=True), "plain", None, None),
    "graph-bfs-small-buffers": (dict(use_graph=True), "plain", None, 3000),
    "graph-recompute": (dict(use_graph=True, recompute="memory"), "plain", None, None),
    "graph-offload": (dict(use_graph=True, offload="all"), "plain", None, None),
    "half": (dict(use_graph=True), "half", None, None),
    "sparse-topk": (dict(use_graph=True), "sparseTopK", 0.1, None),
    "sparse-threshold": (dict(use_graph=False), "sparseThreshold", 0.01, None),
    "partial": (dict(use_graph=True), "partialUpdate", None, 30000),
}


def data_set(seed=0):
    """STEPS * BATCH * WORLD images and labels: every rank's shards together."""
    rng = np.random.default_rng(seed)
    n = STEPS * BATCH * WORLD
    return rng.random((n, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, n).astype(np.int32)


class DistCNN(CNN):
    """The zoo CNN with the train_one_batch of SINGA's distributed examples."""

    def train_one_batch(self, x, y, dist_option, spars, threshold=None):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        extra = {} if threshold is None else {"threshold": threshold}
        if dist_option == "plain":
            self.optimizer.backward_and_update(loss, **extra)
        elif dist_option == "half":
            self.optimizer.backward_and_update_half(loss, **extra)
        elif dist_option == "partialUpdate":
            self.optimizer.backward_and_partial_update(loss, **extra)
        else:
            top_k = dist_option == "sparseTopK"
            self.optimizer.backward_and_sparse_update(loss, spars=spars, topK=top_k, **extra)
        return out, loss


def train(options, dist_option, spars, threshold, sgd, width=500):
    dev = device.create_cpu_device("256MiB")
    dev.SetRandSeed(sgd.global_rank)  # different seeds: rank 0's parameters must win
    model = DistCNN()
    if width != 500:
        model.linear1 = layer.Linear(width)
    model.set_optimizer(sgd)
    x, y = shard(data_set(), sgd.global_rank, sgd.world_size)
    tx = tensor.PlaceHolder((BATCH, 1, 28, 28), dev)
    ty = tensor.PlaceHolder((BATCH,), dev, tensor.int32)
    model.compile([tx], is_train=True, **options)
    losses = []
    for step in range(STEPS):
        tx.copy_from_numpy(x[step * BATCH : (step + 1) * BATCH])
        ty.copy_from_numpy(y[step * BATCH : (step + 1) * BATCH])
        _, loss = model(tx, ty, dist_option, spars, threshold)
        losses.append(tensor.to_numpy(loss)[0])
    return losses, {k: tensor.to_numpy(v) for k, v in model.get_states().items()}


def main(mode, out):
    from mpi4py import MPI

    if mode == "dies-early" and MPI.COMM_WORLD.Get_rank() == 1:
        raise SystemExit("rank 1 stops before it makes its DistOpt")
    try:
        sgd = opt.DistOpt(opt.SGD(**LR), timeout=float(sys.argv[3]) if len(sys.argv) > 3 else 60)
    except DistributedError as e:
        print(f"rank 0 DistributedError: {e}", flush=True)
        raise SystemExit(3) from None
    rank = sgd.global_rank
    if mode == "train":
        saved = {}
        for name, (options, dist_option, spars, threshold) in CONFIGS.items():
            sgd = opt.DistOpt(opt.SGD(**LR), communicator=sgd.communicator)
            before = sgd.wire_bytes
            losses, states = train(options, dist_option, spars, threshold, sgd)
            saved[f"{name}/losses"] = np.array(losses)
            saved[f"{name}/wire_bytes"] = np.array(sgd.wire_bytes - before)
            saved.update({f"{name}/state/{k}": v for k, v in states.items()})
        np.savez(f"{out}/rank{rank}.npz", **saved)
        return
    if mode == "dies" and rank == 1:
        raise SystemExit("rank 1 stops before its first step")
    if mode == "stuck" and rank == 1:
        time.sleep(STUCK_S)
    try:
        train(dict(use_graph=True), "plain", None, None, sgd, width=600 if rank == 1 else 500)
    except DistributedError as e:
        print(f"rank {rank} DistributedError: {e}", flush=True)
        raise SystemExit(3) from None
    print(f"rank {rank} trained", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
