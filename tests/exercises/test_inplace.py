"""Exercise 3 (tutorial 02): the in-place rule, nnmem/graph/liveness.py:may_write_in_place.

May the node at replay position p write its output over its input's bytes? Exactly when p is
the input's last reader, the input got its bytes before p, the output's life starts at p, and
the output fits in the input's slot (exercises/02_inplace.md). The tests ask the rule
directly, then through liveness.slots on hand-made steps, then on a recorded model whose
graph-mode numbers must stay those of eager mode (the trap changes them)."""

import numpy as np
import pytest

from nnmem import autograd, device, layer, model, opt, tensor
from nnmem.graph.liveness import INTERMEDIATE, may_write_in_place, slots
from nnmem.graph.recorder import ArraySpec, Node

pytestmark = pytest.mark.exercise_inplace

A = 256


# -- the rule itself ------------------------------------------------------------------------


def test_the_last_reader_may_write_over_its_input():
    # the input lives at positions 2..5, the node at 5 writes the output, live 5..9
    assert may_write_in_place(5, (5, 9), (2, 5), A, A) is True


def test_the_trap_an_input_read_later_is_not_written_over():
    assert may_write_in_place(5, (5, 9), (2, 6), A, A) is False
    assert may_write_in_place(5, (5, 9), (2, 40), A, A) is False


def test_an_input_first_used_at_this_node_has_no_bytes_to_give():
    assert may_write_in_place(5, (5, 9), (5, 5), A, A) is False


def test_an_output_live_before_this_node_keeps_its_own_bytes():
    assert may_write_in_place(5, (4, 9), (2, 5), A, A) is False
    assert may_write_in_place(5, (0, 9), (2, 5), A, A) is False


def test_the_output_must_fit_in_the_inputs_slot():
    assert may_write_in_place(5, (5, 9), (2, 5), 2 * A, A) is False
    assert may_write_in_place(5, (5, 9), (2, 5), 2 * A, 2 * A) is True  # equal sizes fit
    assert may_write_in_place(5, (5, 9), (2, 5), A, 4 * A) is True  # a smaller one too


def test_how_long_the_output_lives_does_not_matter():
    assert may_write_in_place(5, (5, 5), (2, 5), A, A) is True
    assert may_write_in_place(5, (5, 500), (4, 5), A, A) is True


def test_positions_are_compared_not_guessed_from_the_first_position():
    assert may_write_in_place(0, (0, 3), (0, 0), A, A) is False
    assert may_write_in_place(1, (1, 3), (0, 1), A, A) is True
    assert may_write_in_place(1000, (1000, 1001), (999, 1000), A, A) is True


# -- through liveness.slots, on hand-made steps ------------------------------------------


class FakeBlock:
    def __init__(self, name, nbytes):
        self.desc, self.nbytes = name, nbytes

    def __repr__(self):
        return self.desc


def node(index, writes, reads, inplace=()):
    spec = lambda b: ArraySpec(b, (b.nbytes,), "uint8")  # noqa: E731
    return Node(
        index, f"n{index}", None, tuple(map(spec, writes)), tuple(map(spec, reads)), inplace
    )


def plan(nodes):
    """The slots of a step whose every block is an intermediate, replayed in order."""
    kinds = {id(b): INTERMEDIATE for n in nodes for b in n.blocks()}
    return slots(nodes, list(range(len(nodes))), kinds, round_up=lambda n: -(-n // A) * A)


def shared(result, a, b):
    return any(a in s.blocks and b in s.blocks for s in result)


def test_a_chain_of_elementwise_nodes_runs_in_one_slot():
    a, b, c, d = (FakeBlock(name, 4 * A) for name in "abcd")
    result = plan(
        [
            node(0, [a], []),
            node(1, [b], [a], inplace=((b, a),)),
            node(2, [c], [b], inplace=((c, b),)),
            node(3, [d], [c]),  # reads c, may not write over it (not listed)
        ]
    )
    assert shared(result, a, b) and shared(result, b, c) and not shared(result, c, d)
    chain = next(s for s in result if a in s.blocks)
    assert chain.ranges == [(0, 1), (1, 2), (2, 3)] and (chain.first, chain.last) == (0, 3)


def test_the_trap_on_a_hand_made_step():
    h, r, y = (FakeBlock(name, A) for name in ("h", "relu(h)", "h + relu(h)"))
    result = plan(
        [
            node(0, [h], []),
            node(1, [r], [h], inplace=((r, h),)),  # h is read again at 2: not its last reader
            node(2, [y], [r, h], inplace=((y, r), (y, h))),  # the last reader of both
            node(3, [], [y]),
        ]
    )
    assert not shared(result, r, h)
    assert shared(result, y, r)  # the first allowed pair is taken; h's slot stays apart
    assert len(result) == 2


def test_an_output_larger_than_its_input_gets_a_slot_of_its_own():
    small, large = FakeBlock("small", A), FakeBlock("large", 2 * A)
    result = plan([node(0, [small], []), node(1, [large], [small], inplace=((large, small),))])
    assert not shared(result, small, large) and len(result) == 2


def test_sizes_are_compared_rounded_up_to_the_slots():
    a, b = FakeBlock("100 bytes", 100), FakeBlock("200 bytes", 200)  # both take 256
    result = plan([node(0, [a], []), node(1, [b], [a], inplace=((b, a),))])
    assert shared(result, a, b) and len(result) == 1


# -- a recorded model -----------------------------------------------------------------------


class Trap(model.Model):
    """fc2(relu(h) + h), tutorial 02's trap: relu(h) must not write over h (the add reads h
    after it); the add, h's last reader, may. Written over, h would reach the add as relu(h):
    fc2 would see 2 relu(h) instead of relu(h) + h, and the losses would move."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = layer.Linear(6), layer.Linear(4)
        self.loss = layer.MeanSquareError()

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(autograd.add(autograd.relu(h), h))

    def train_one_batch(self, x, t):
        out = self.forward(x)
        loss = self.loss(out, t)
        self.optimizer(loss)
        return out, loss


def train_trap(use_graph):
    dev = device.create_cpu_device("16MiB")
    dev.SetRandSeed(0)
    net = Trap()
    net.set_optimizer(opt.SGD(lr=0.1))
    rng = np.random.default_rng(0)
    x = tensor.from_numpy(rng.standard_normal((4, 3)).astype(np.float32), dev)
    t = tensor.from_numpy(rng.standard_normal((4, 4)).astype(np.float32), dev)
    net.compile([x], is_train=True, use_graph=use_graph)
    losses = [float(tensor.to_numpy(net(x, t)[1])[0]) for _ in range(3)]
    states = {k: tensor.to_numpy(v) for k, v in net.get_states().items()}
    return net, losses, states, x, t


def test_the_trap_in_a_recorded_step_and_the_numbers_it_would_change():
    net, losses, states, x, t = train_trap(use_graph=True)
    _, eager_losses, eager_states, _, _ = train_trap(use_graph=False)
    assert losses == eager_losses, "graph mode must not change a number"
    for key, value in eager_states.items():
        np.testing.assert_array_equal(states[key], value, err_msg=key)

    step = net.compiled_step(x, t)
    slot_of = {id(b): s for s in step.slots for b in s.blocks}

    def written_by(name):
        return next(n for n in step.nodes if n.name == name).writes[0].block

    h, relu_h, y = written_by("fc1:AddBias"), written_by("ReLU"), written_by("Add")
    assert slot_of[id(relu_h)] is not slot_of[id(h)], "relu(h) over h: the trap"
    assert slot_of[id(y)] is slot_of[id(h)], "the add is h's last reader"
    assert step.memory_summary()["inplace_merges"] >= 1
