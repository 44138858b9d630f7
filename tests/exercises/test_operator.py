"""Exercise 2 (tutorial 01): an operator through device.exec,
nnmem/ops/activation.py:_Activation.forward (the forward of ReLU and Sigmoid).

The contract (exercises/01_operator.md): one new output y of x's shape and dtype; ONE kernel
call handed to the device, reading x and writing y, run as fn(y_array, x_array); y may take
x's memory (inplace=((y, x),)); the call may be run again to rebuild y (rebuild=SAME); y is
saved for backward, not x. The tests watch the calls the device receives, the pool's bytes,
the gradients, and a recorded graph-mode step."""

import inspect

import numpy as np
import pytest

from nnmem import autograd, device, layer, model, opt, tensor
from nnmem.devices.base import Device
from nnmem.kernels import cpu as K
from nnmem.memory.units import aligned_size
from nnmem.operation import SAME
from nnmem.ops.activation import ReLU, Sigmoid

pytestmark = pytest.mark.exercise_operator

OPERATORS = {"relu": ReLU, "sigmoid": Sigmoid}
KERNELS = {"relu": K.relu_forward, "sigmoid": K.sigmoid_forward}
EXEC = inspect.signature(Device.exec)


def values(shape, dtype, seed=0):
    """Random values with zeros, negatives and large magnitudes among them."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype) * 4
    flat = x.reshape(-1)
    flat[: min(3, flat.size)] = [0.0, -60.0, 60.0][: min(3, flat.size)]
    return x


def expected(name, x):
    """What the CPU kernel writes for x: the values, bit for bit."""
    y = np.empty_like(x)
    KERNELS[name](y.reshape(-1), x.reshape(-1))
    return y


@pytest.fixture
def dev():
    return device.create_cpu_device("16MiB")


@pytest.fixture
def exec_calls(dev, monkeypatch):
    """Every call the device's exec receives, as a dict of its arguments by name."""
    calls = []
    run = dev.exec

    def spy(*args, **kwargs):
        bound = EXEC.bind(dev, *args, **kwargs)
        bound.apply_defaults()
        calls.append(dict(bound.arguments))
        return run(*args, **kwargs)

    monkeypatch.setattr(dev, "exec", spy)
    return calls


@pytest.mark.parametrize("name", sorted(OPERATORS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (7,), (2, 3, 4)])
def test_the_values_are_the_kernels(dev, name, dtype, shape):
    x_np = values(shape, dtype)
    x = tensor.from_numpy(x_np, dev)
    y = OPERATORS[name]()(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(tensor.to_numpy(y), expected(name, x_np))
    np.testing.assert_array_equal(tensor.to_numpy(x), x_np)  # eagerly, x is left as it was


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_one_kernel_call_through_the_device(dev, exec_calls, name):
    x = tensor.from_numpy(values((3, 5), np.float32), dev)
    op = OPERATORS[name]()
    y = op(x)
    assert len(exec_calls) == 1, "forward hands the device exactly one kernel call"
    (call,) = exec_calls
    assert len(call["reads"]) == 1 and call["reads"][0] is x
    assert len(call["writes"]) == 1 and call["writes"][0] is y
    assert y.block is not x.block, "y is a new tensor (self.output), not x"
    assert call["phase"] == "forward"
    # the device calls fn(*write_arrays, *read_arrays), with the tensors' own shapes
    x_np = values((3, 5), np.float32, seed=1)
    out = np.full_like(x_np, np.nan)
    call["fn"](out, x_np)
    np.testing.assert_array_equal(out, expected(name, x_np))


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_y_may_take_the_memory_of_x(dev, exec_calls, name):
    x = tensor.from_numpy(values((4,), np.float32), dev)
    y = OPERATORS[name]()(x)
    pairs = [tuple(pair) for pair in exec_calls[0]["inplace"]]
    assert len(pairs) == 1 and pairs[0][0] is y and pairs[0][1] is x, "inplace=((y, x),)"


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_the_call_may_be_run_again_to_rebuild_y(dev, exec_calls, name):
    x = tensor.from_numpy(values((4,), np.float32), dev)
    OPERATORS[name]()(x)
    assert exec_calls[0]["rebuild"] == SAME


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_the_pool_gives_y_its_bytes_and_nothing_else(dev, name):
    x = tensor.from_numpy(values((10, 10), np.float32), dev)
    before = dev.memory_stats()
    y = OPERATORS[name]()(x)
    after = dev.memory_stats()
    assert after["num_allocs"] - before["num_allocs"] == 1
    assert after["allocated_bytes.current"] - before["allocated_bytes.current"] == aligned_size(
        y.memsize(), dev.pool.alignment
    )


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_backward_keeps_y_and_lets_x_go(dev, name):
    """Saved: y, not x. So x's bytes go back to the pool as soon as Python drops it, and the
    gradient is written from y alone (relu: dy [y > 0]; sigmoid: dy y (1 - y))."""
    autograd.training = True
    p_np = values((2, 6), np.float32)
    p = tensor.from_numpy(p_np, dev)
    p.requires_grad = p.stores_grad = True
    x = autograd.mul(p, tensor.from_numpy(np.full((2, 6), 0.5, np.float32), dev))  # x = p / 2
    op = OPERATORS[name]()
    y = op(x)
    assert [t.block for t in op.saved] == [y.block], "save(y): the output, not the input"
    allocated = dev.memory_stats()["allocated_bytes.current"]
    x_bytes = aligned_size(x.memsize(), dev.pool.alignment)
    del x
    assert dev.memory_stats()["allocated_bytes.current"] == allocated - x_bytes

    t_np = np.random.default_rng(2).standard_normal((2, 6)).astype(np.float32)
    loss = autograd.mse_loss(y, tensor.from_numpy(t_np, dev))
    y_np = tensor.to_numpy(y)
    dy = 2 * (y_np - t_np) / y_np.size  # SINGA's mse: sum((y - t)^2) / n, n = every element
    local = (y_np > 0).astype(np.float32) if name == "relu" else y_np * (1 - y_np)
    grads = {id(param): tensor.to_numpy(g) for param, g in autograd.backward(loss)}
    np.testing.assert_allclose(grads[id(p)], dy * local * 0.5, rtol=1e-5, atol=1e-7)


class Net(model.Model):
    """fc2(act(fc1(x))): nothing but the activation reads fc1's output, so in graph mode the
    activation may write over it."""

    def __init__(self, act):
        super().__init__()
        self.fc1, self.act, self.fc2 = layer.Linear(8), act, layer.Linear(3)
        self.loss = layer.MeanSquareError()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def train_one_batch(self, x, t):
        out = self.forward(x)
        loss = self.loss(out, t)
        self.optimizer(loss)
        return out, loss


def train_net(name, use_graph):
    dev = device.create_cpu_device("16MiB")
    dev.SetRandSeed(0)
    net = Net(autograd.relu if name == "relu" else autograd.sigmoid)
    net.set_optimizer(opt.SGD(lr=0.1))
    rng = np.random.default_rng(3)
    x = tensor.from_numpy(rng.standard_normal((4, 5)).astype(np.float32), dev)
    t = tensor.from_numpy(rng.standard_normal((4, 3)).astype(np.float32), dev)
    # unfused: graph mode would fuse the linear layer's bias with the ReLU (graph/fuse.py)
    net.compile([x], is_train=True, use_graph=use_graph, fuse=False)
    losses = [float(tensor.to_numpy(net(x, t)[1])[0]) for _ in range(3)]
    return net, losses, x, t


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_in_graph_mode_the_recorded_call_is_planned_in_place(name):
    net, losses, x, t = train_net(name, use_graph=True)
    assert losses == train_net(name, use_graph=False)[1], "graph mode changes no number"
    step = net.compiled_step(x, t)
    op_name = "ReLU" if name == "relu" else "Sigmoid"
    node = next(n for n in step.nodes if n.name == op_name and n.phase == "forward")
    assert node.rebuild == SAME
    ((y_spec,), (x_spec,)) = node.writes, node.reads
    assert node.inplace == ((y_spec.block, x_spec.block),)
    slot_of = {id(b): s for s in step.slots for b in s.blocks}
    assert slot_of[id(y_spec.block)] is slot_of[id(x_spec.block)], "y written over x"
