"""Graph mode when things go wrong, and settings changed between steps (review findings)."""

import numpy as np
import pytest
from training import batches

from nnmem import device, layer, model, opt, tensor
from nnmem.memory import OutOfMemory, Pool, RecordingReadError
from nnmem.memory.arena import SharedArena
from nnmem.models import create_model


class User:
    """Stands in for a compiled step: records where the arena put it."""

    def __init__(self):
        self.placed = []

    def place(self, offset):
        self.placed.append(offset)


def test_a_failed_arena_grow_moves_no_user_onto_freed_bytes():
    a = 256
    pool = Pool(16 * a)
    hole = pool.alloc(5 * a)  # [0, 5a): freed below, a hole the old size fits in
    pool.alloc(a)  # [5a, 6a): keeps the hole apart from the arena
    arena = SharedArena(pool)
    user = User()
    arena.join(user, 4 * a)  # the arena at [6a, 10a), tail [10a, 16a) free
    pool.free(hole)
    with pytest.raises(OutOfMemory):
        arena.join(User(), 13 * a)  # fits nowhere: the old size is allocated again
    assert arena.size == 4 * a
    assert arena.offset == 0, "best fit put the old size back into the hole"
    assert user.placed == [6 * a, 0], "the user must follow the arena where it went"
    assert arena.offset in {off for off, _, _ in pool.live_blocks()}
    assert len(list(arena._users)) == 1


def setup_resnet(pool):
    dev = device.create_cpu_device(pool)
    dev.SetRandSeed(0)
    m = create_model("resnet", depth=8)
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    tx, ty = tensor.PlaceHolder((4, 3, 16, 16), dev), tensor.PlaceHolder((4,), dev, tensor.int32)
    tx.copy_from_numpy(np.random.default_rng(0).random((4, 3, 16, 16), dtype=np.float32))
    ty.set_value(1)
    m.compile([tx], use_graph=True, recompute="memory")
    return dev, m, tx, ty


def test_a_new_layout_that_does_not_fit_keeps_the_old_one():
    dev, m, tx, ty = setup_resnet("64MiB")
    reference = [float(tensor.to_numpy(m(tx, ty)[1])[0]) for _ in range(3)]
    tight = dev.memory_stats()["allocated_bytes.current"] + 64 * 1024
    dev, m, tx, ty = setup_resnet(tight)
    losses = [float(tensor.to_numpy(m(tx, ty)[1])[0])]
    step = m.compiled_step(tx, ty)
    layout_before, offset_before = step.layout, dev.graph_arena.offset
    dev.recycle = False  # the baseline layout needs far more than the pool has
    with pytest.raises(OutOfMemory):
        step.replan(False)
    dev.recycle = True
    assert step.layout is layout_before and step.recompute_policy == "memory"
    assert dev.graph_arena.offset is not None
    bystander = tensor.Tensor((dev.memory_stats()["largest_free_block"] // 4,), dev).set_value(7)
    losses += [float(tensor.to_numpy(m(tx, ty)[1])[0]) for _ in range(2)]
    assert losses == reference
    assert (tensor.to_numpy(bystander) == 7).all(), "a replay wrote into another tensor"
    assert offset_before is not None


class TwoDropouts(model.Model):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = layer.Linear(16), layer.Linear(3)
        self.drop = layer.Dropout(0.5)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc2(self.drop(self.fc1(layer.Flatten()(x))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def run_with_changes(use_graph):
    """Reseed every step, and change momentum and weight decay as a schedule would."""
    dev = device.create_cpu_device("16MiB")
    dev.SetRandSeed(0)
    m = TwoDropouts()
    sgd = opt.SGD(lr=0.1, momentum=0.5)
    m.set_optimizer(sgd)
    tx, ty = tensor.PlaceHolder((4, 1, 3, 3), dev), tensor.PlaceHolder((4,), dev, tensor.int32)
    m.compile([tx], use_graph=use_graph)
    losses = []
    for step, (x, y) in enumerate(batches((4, 1, 3, 3), 4, classes=3)):
        dev.SetRandSeed(123)
        sgd.momentum, sgd.weight_decay = 0.5 + 0.1 * step, 1e-3 * step
        tx.copy_from_numpy(x)
        ty.copy_from_numpy(y)
        losses.append(tensor.to_numpy(m(tx, ty)[1])[0])
    return losses


def test_reseeding_and_hyperparameter_changes_reach_the_replay():
    assert run_with_changes(False) == run_with_changes(True)


class Scaled(model.Model):
    """train_one_batch takes a keyword argument that changes the step."""

    def __init__(self):
        super().__init__()
        self.fc = layer.Linear(2)
        self.loss = layer.MeanSquareError()

    def forward(self, x):
        return self.fc(x)

    def train_one_batch(self, x, t, double=False):
        out = self.forward(x)
        if double:
            out = out * 2.0
        loss = self.loss(out, t)
        self.optimizer(loss)
        return out, loss


def test_keyword_arguments_select_their_own_graph():
    dev = device.create_cpu_device("4MiB")
    m = Scaled()
    m.set_optimizer(opt.SGD(lr=0.0))
    x = tensor.from_numpy(np.ones((2, 3), np.float32), dev)
    t = tensor.from_numpy(np.zeros((2, 2), np.float32), dev)
    m.compile([x], use_graph=True)
    single = tensor.to_numpy(m(x, t)[0]).copy()
    double = tensor.to_numpy(m(x, t, double=True)[0]).copy()
    np.testing.assert_array_equal(double, 2 * single)
    assert len(m._graphs) == 2


def test_raw_while_recording_is_the_clear_error():
    class Peek(Scaled):
        def train_one_batch(self, x, t):
            out = self.forward(x)
            out.raw  # noqa: B018 - the read itself is the test
            return out, out

    dev = device.create_cpu_device("4MiB")
    m = Peek()
    x = tensor.from_numpy(np.ones((2, 3), np.float32), dev)
    m.compile([x], use_graph=True)
    with pytest.raises(RecordingReadError, match="after model"):
        m(x, x)
