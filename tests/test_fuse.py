"""Graph mode's fusion pass (nnmem/graph/fuse.py): which chains it fuses, that the numbers stay
the unfused step's bit for bit (with every memory technique too), and that the plan's peak
never rises."""

import pytest

from nnmem import autograd, device, layer, model, tensor
from nnmem.graph.fuse import Fusion
from nnmem.graph.liveness import block_kinds
from nnmem.graph.plan import make_plan
from nnmem.models import create_model
from tests.training import assert_identical, batches, train

RESNET = dict(depth=8, num_channels=3)


def _chains(m, data, **options):
    _, _, _, tx, ty = train(m, data, use_graph=True, **options)
    step = m.compiled_step(tx, ty)
    return step, Fusion.of(step.fusions, 0).chains


@pytest.fixture(scope="module")
def resnet_data():
    return batches((4, 3, 16, 16), 3)


@pytest.fixture(scope="module")
def resnet_unfused(resnet_data):
    # a module's fixture runs before the per-test one that restores the training flag
    # (conftest.py): it restores the flag itself
    previous = autograd.training
    try:
        return train(create_model("resnet", **RESNET), resnet_data, use_graph=True, fuse=False)
    finally:
        autograd.training = previous


def test_resnet_fuses_every_batchnorm_chain_and_keeps_the_bits(resnet_data, resnet_unfused):
    m = create_model("resnet", **RESNET)
    losses, states, _, tx, ty = train(m, resnet_data, use_graph=True)
    assert_identical((losses, states), resnet_unfused[:2])
    step = m.compiled_step(tx, ty)
    ops = [n.name.rpartition(":")[2] for n in step.recorded]
    counts = {op: ops.count(op) for op in ("BatchNorm2d+ReLU", "BatchNorm2d+Add+ReLU")}
    # ResNet-8: the stem and one block per stage; a block's first BN feeds a ReLU, its second
    # a residual join. Each chain once forward and once backward; no BatchNorm2d left alone but
    # the projection shortcuts' (their output feeds the join as r).
    assert counts == {"BatchNorm2d+ReLU": 2 * 4, "BatchNorm2d+Add+ReLU": 2 * 3}
    assert ops.count("ReLU") == 0
    assert ops.count("BatchNorm2d") == 2 * 2  # the two projection shortcuts
    # a pair becomes one node, a triple (forward BN + Add + ReLU) one: 4 + 4 + 3 * 2 + 3 fewer
    assert len(step.recorded) == len(step.unfused) - 17
    # the liveness peak (the arena's lower bound) never rises; the greedy layout of the arena
    # may land a few bytes above it where the unfused one did not
    unfused = make_plan(
        step.unfused, block_kinds(step.unfused)[0], step.device, False, "none", "none"
    )
    assert step.layout.lower_bound <= unfused.layout.lower_bound
    assert step.fusion_saving() == unfused.layout.arena_bytes - step.layout.arena_bytes
    assert step.fusion_saving() > -0.01 * unfused.layout.arena_bytes


def test_eager_and_fused_graph_agree(resnet_data, resnet_unfused):
    eager = train(create_model("resnet", **RESNET), resnet_data, use_graph=False)
    assert_identical(eager[:2], resnet_unfused[:2])


@pytest.mark.parametrize(
    "options",
    [
        dict(recompute="speed"),
        dict(recompute="memory"),
        dict(offload="all"),
        dict(sequential=True),
    ],
)
def test_memory_techniques_on_a_fused_step_keep_the_bits(resnet_data, resnet_unfused, options):
    losses, states, _, _, _ = train(create_model("resnet", **RESNET), resnet_data, True, **options)
    assert_identical((losses, states), resnet_unfused[:2])


def test_cnn_fuses_bias_and_relu_both_ways():
    data = batches((8, 1, 28, 28), 3)
    m = create_model("cnn")
    step, counts = _chains(m, data)
    # conv1, conv2 and linear1 add a bias and then ReLU: forward and backward each
    assert counts == {"bias+ReLU": 6}
    fused = train(create_model("cnn"), data, use_graph=True)
    unfused = train(create_model("cnn"), data, use_graph=True, fuse=False)
    assert_identical(fused[:2], unfused[:2])


class _Shared(model.Model):
    """y = bn(x) is read twice (by a ReLU and by the sum): the BN's output must stay, so
    BN + ReLU does not fuse; the ReLU's own chain with the backward does not either."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1, bias=False)
        self.bn = layer.BatchNorm2d(4)
        self.linear = layer.Linear(3)

    def forward(self, x):
        y = self.bn(self.conv(x))
        z = autograd.add(autograd.relu(y), y)
        return self.linear(autograd.flatten(z))

    def train_one_batch(self, x, t):
        out = self.forward(x)
        loss = autograd.softmax_cross_entropy(out, t)
        self.optimizer(loss)
        return out, loss


def test_a_tensor_read_twice_is_not_fused_away():
    data = batches((2, 3, 6, 6), 2, classes=3)
    m = _Shared()
    step, counts = _chains(m, data)
    assert "BatchNorm2d+ReLU" not in counts
    names = [n.name.rpartition(":")[2] for n in step.recorded]
    assert "BatchNorm2d" in names and "ReLU" in names
    fused = train(_Shared(), data, use_graph=True)
    unfused = train(_Shared(), data, use_graph=True, fuse=False)
    assert_identical(fused[:2], unfused[:2])


def test_fuse_must_be_a_bool():
    dev = device.create_cpu_device("16MiB")
    tx = tensor.PlaceHolder((2, 1, 28, 28), dev)
    with pytest.raises(TypeError, match="fuse=1"):
        create_model("cnn").compile([tx], use_graph=True, fuse=1)


def test_the_pass_keeps_its_readers_and_writers_tables_as_a_fresh_index(resnet_data, monkeypatch):
    """replace() updates only the lists of the blocks a chain's nodes read or write (a scan of
    every list at each fusion made the pass quadratic): after every fusion the tables list the
    slots that indexing the slots afresh lists (in slot order there; the order is not used)."""
    from nnmem.graph import fuse as fuse_module

    checked = []
    original = fuse_module._Step.replace

    def checked_replace(step, chain, target, fused):
        original(step, chain, target, fused)
        fresh = fuse_module._Step([n for n in step.slots if n is not None])
        # the fresh index numbers the slots that are left 0, 1, ...; map them back
        where = [i for i, n in enumerate(step.slots) if n is not None]
        for table, again in ((step.readers, fresh.readers), (step.writers, fresh.writers)):
            kept = {key: sorted(users) for key, users in table.items() if users}
            assert kept == {key: [where[u] for u in users] for key, users in again.items()}
        checked.append(chain)

    monkeypatch.setattr(fuse_module._Step, "replace", checked_replace)
    train(create_model("resnet", **RESNET), resnet_data, use_graph=True)
    assert len(checked) == 14  # ResNet-8's fusions (2 * 4 + 2 * 3), each checked
