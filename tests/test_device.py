"""The device seam: kinds of device, kernels taken from the device, host copies through it,
streams and events; and one training step that gives the same numbers on every device."""

import ast
import os
import pathlib
import threading
import time

import numpy as np
import pytest
from training import batches, train

import nnmem.kernels.cpu as cpu_kernels
from nnmem import autograd, device, layer, model, opt, tensor
from nnmem import device as device_module
from nnmem.models import create_model
from nnmem.ops import conv as conv_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_each_kind_has_its_storage_and_kernels():
    cpu, planning = device.create_cpu_device("1MiB"), device.create_planning_device()
    assert isinstance(cpu, device.CpuDevice) and isinstance(planning, device.PlanningDevice)
    assert cpu.kernels is cpu_kernels and cpu.runs_kernels and not planning.runs_kernels
    assert cpu.storage.buffer.nbytes == cpu.pool.capacity
    t = tensor.Tensor((3,), planning).set_value(1)  # a planning write only allocates
    assert t.block.allocated
    with pytest.raises(ValueError, match="planning device"):
        tensor.to_numpy(t)


def test_no_operator_imports_a_kernel_module():
    """Operators, layers and optimizers take kernels from the device: only the devices (which
    provide them) import a kernel backend (nnmem.kernels.cpu or .cuda). The kernel contract and
    the host-side sizes (nnmem.kernels.contract, .sizes) compile nothing and may be read by
    anyone above them."""
    host_side = {"nnmem.kernels.contract", "nnmem.kernels.sizes"}
    importers = []
    for path in sorted((ROOT / "nnmem").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            kernels = [n for n in names if n.startswith("nnmem.kernels")]
            if any(not any(n.startswith(h) for h in host_side) for n in kernels):
                importers.append(path.relative_to(ROOT / "nnmem").parts[0])
    assert set(importers) == {"devices"}, importers


class _Net(model.Model):
    """One of every operator: conv, batchnorm, relu, both poolings, cat, dropout, linear."""

    def __init__(self):
        super().__init__()
        # no bias: BatchNorm cancels it, so its gradient is rounding noise, which Adam (which
        # divides by the gradient's size) would turn into updates of full size
        self.conv = layer.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn = layer.BatchNorm2d(4)
        self.relu = layer.ReLU()
        self.maxpool, self.avgpool = layer.MaxPool2d(2, 2), layer.AvgPool2d(2, 2)
        self.dropout = layer.Dropout(0.3)
        self.flatten = layer.Flatten()
        self.linear = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.relu(self.bn(self.conv(x)))
        y = autograd.cat([self.maxpool(y), self.avgpool(y)], 1)
        return self.linear(self.flatten(self.dropout(y)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


@pytest.mark.parametrize("use_graph", [False, True])
def test_operators_call_only_the_device_kernels(monkeypatch, use_graph):
    """Every name of nnmem.kernels.cpu is made to fail; a device that keeps the real ones
    (and counts its calls) still trains: no operator called the module behind its back."""
    calls = {}

    def counted(name, kernel):
        def run(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return kernel(*args, **kwargs)

        return run

    class Counting(device.CpuDevice):
        kernels = type("Kernels", (), {n: staticmethod(counted(n, getattr(cpu_kernels, n)))
                                       for n in cpu_kernels.__all__})  # fmt: skip

    for name in cpu_kernels.__all__:
        monkeypatch.setattr(cpu_kernels, name, lambda *a, name=name, **k: pytest.fail(name))
    monkeypatch.setattr(conv_ops, "BENCHMARKED", {})  # Conv2d times its candidates
    dev = Counting("64MiB")
    data = batches((2, 2, 4, 4), 2, classes=3)
    losses = train(_Net(), data, use_graph, optimizer=opt.Adam(lr=0.01), dev=dev)[0]
    assert np.isfinite(losses).all()
    # graph mode fuses the BatchNorm with the ReLU after it (graph/fuse.py)
    bn = "batchnorm2d_relu_forward_train" if use_graph else "batchnorm2d_forward_train"
    used = f"conv3x3_forward {bn}"
    used += " maxpool2d_backward avgpool2d_forward concat_copy_in concat_copy_out"
    used += " dropout_forward matmul adam_update increment"
    for used in used.split() + ["softmax_cross_entropy_forward"]:
        assert calls.get(used), f"{used} was never called through the device"


# -- streams and events (the CPU's: a worker thread per stream) -----------------------------
def test_a_stream_runs_its_work_in_order_beside_the_host():
    dev = device.create_cpu_device("1MiB")
    stream, done = dev.create_stream(), dev.create_event()
    order, gate = [], threading.Event()
    stream.submit(gate.wait)  # the stream is held until the host opens the gate
    for i in range(5):
        stream.submit(order.append, i)
    done.record(stream)
    assert not done.query() and order == []  # queued, not run: the host went on
    gate.set()
    done.synchronize()
    assert done.query() and order == [0, 1, 2, 3, 4]


def test_a_stream_waits_for_an_event_of_another_stream():
    dev = device.create_cpu_device("1MiB")
    copy, compute, copied = dev.create_stream(), dev.create_stream(), dev.create_event()
    seen = []
    copy.submit(time.sleep, 0.05)
    copy.submit(seen.append, "copy")
    copied.record(copy)
    copied.wait(compute)  # compute may not run past this point before the copy is done
    compute.submit(seen.append, "compute")
    compute.synchronize()
    assert seen == ["copy", "compute"]


def test_a_failure_on_a_stream_is_raised_at_the_next_synchronize():
    stream = device.create_cpu_device("1MiB").create_stream()
    ran = []
    stream.submit(lambda: 1 / 0)
    stream.submit(ran.append, "after")  # may depend on what failed: dropped
    with pytest.raises(ZeroDivisionError):
        stream.synchronize()
    assert ran == []
    stream.submit(ran.append, "later")  # the stream is usable again
    stream.synchronize()
    assert ran == ["later"]


def test_asynchronous_copies_between_a_tensor_and_the_host(device):
    t = tensor.Tensor((4, 5), device).set_value(0)
    host = device.pinned_array((4, 5), np.float32)
    host[...] = np.arange(20, dtype=np.float32).reshape(4, 5)
    stream, done = device.create_stream(), device.create_event()
    device.copy_from_host_async(t, host, stream)
    done.record(stream)
    done.synchronize()
    np.testing.assert_array_equal(tensor.to_numpy(t), host)
    back = np.zeros((4, 5), np.float32)
    device.copy_to_host_async(t, back, stream)
    stream.synchronize()
    np.testing.assert_array_equal(back, host)
    out = np.empty((4, 5), np.float32)
    assert device.to_host(t, out=out) is out and (out == host).all()


def test_host_writes_and_reads_go_through_the_device(device):
    t = tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), device)
    u = tensor.Tensor((2, 3), device).set_value(2.5)
    device.copy_tensor(u, t)
    np.testing.assert_array_equal(tensor.to_numpy(u), np.arange(6).reshape(2, 3))
    device.SetRandSeed(3)
    g = tensor.Tensor((1000,), device).gaussian(1.0, 2.0)
    assert abs(tensor.to_numpy(g).mean() - 1.0) < 0.3


# -- CUDA without a GPU --------------------------------------------------------------------
def test_no_gpu_is_a_clear_error_naming_the_cpu_device():
    try:
        from numba import cuda
    except ImportError:
        cuda = None
    if cuda is not None and cuda.is_available():
        pytest.skip("a GPU (or the simulator) is present: the device can be created")
    with pytest.raises(device.DeviceUnavailable, match="create_cpu_device"):
        device.create_cuda_gpu()


# -- the same steps on every device ----------------------------------------------------------
def assert_same_training(make, data, use_graph, device, optimizer=opt.SGD):
    """`make()`'s losses, parameters and running statistics after training on `data` equal the
    CPU device's: to float32 tolerance on another device, bit for bit on a CPU device."""
    reference = train(make(), data, use_graph, pool="64MiB", optimizer=optimizer(lr=0.05))
    result = train(make(), data, use_graph, dev=device, optimizer=optimizer(lr=0.05))
    np.testing.assert_allclose(result[0], reference[0], rtol=1e-4, atol=1e-5)
    for key, value in reference[1].items():
        np.testing.assert_allclose(result[1][key], value, rtol=1e-3, atol=1e-4, err_msg=key)
    if device.kind == "cpu":
        assert result[0] == reference[0]


@pytest.mark.parametrize("use_graph", [False, True])
def test_steps_of_every_operator_give_the_cpu_numbers(device, use_graph):
    """Two Adam steps of a net with one of every operator (dropout included: its masks are
    drawn by the kernels from the same counter)."""
    data = batches((2, 2, 4, 4), 2, classes=3)
    assert_same_training(_Net, data, use_graph, device, optimizer=opt.Adam)


#: The CUDA simulator runs each GPU thread as Python: one step of the seed CNN takes about
#: 3 1/2 minutes on it (210 s measured, batch 1), too long for every test run.
SIM_MODELS = "NNMEM_SIM_MODELS"


@pytest.mark.parametrize("name, shape", [("cnn", (1, 1, 16, 16)), ("resnet", (1, 3, 8, 8))])
@pytest.mark.parametrize("use_graph", [False, True])
def test_a_step_of_the_seed_cnn_and_of_a_resnet_gives_the_cpu_numbers(
    device, name, shape, use_graph
):
    """One SGD step of the seed CNN and of a ResNet-8 (BatchNorm, residual adds)."""
    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if device.kind == "cuda" and simulated and os.environ.get(SIM_MODELS) != "1":
        pytest.skip(f"minutes per step on the CUDA simulator: set {SIM_MODELS}=1 to run it")
    data = batches(shape, 1, classes=10)
    assert_same_training(
        lambda: create_model(name, num_classes=10, num_channels=shape[1], depth=8),
        data,
        use_graph,
        device,
    )


# -- convolution algorithms chosen by timing (SuperNeurons 3.5) -------------------------------
class _Convs(model.Model):
    def __init__(self, algorithm):
        super().__init__()
        self.conv1 = layer.Conv2d(1, 4, 3, padding=1, algorithm=algorithm)
        self.conv2 = layer.Conv2d(4, 4, 3, padding=1, algorithm=algorithm)
        self.flatten, self.linear = layer.Flatten(), layer.Linear(10)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.linear(self.flatten(self.conv2(self.conv1(x))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def test_auto_times_the_algorithms_once_and_fixes_the_choice(device, monkeypatch):
    timings = []
    real = conv_ops._time_candidates
    monkeypatch.setattr(conv_ops, "BENCHMARKED", {})
    monkeypatch.setattr(conv_ops, "_time_candidates", lambda *a: timings.append(1) or real(*a))
    data = batches((2, 1, 6, 6), 3)
    eager = train(_Convs("auto"), data, False, dev=device)
    assert len(timings) == 5  # forward x2, backward filter x2, backward data (conv2 only)
    net = _Convs("auto")
    graph = train(net, data, True, dev=device)
    assert len(timings) == 5  # the graph and its replays reuse the choices
    np.testing.assert_array_equal(eager[0], graph[0])  # one algorithm per pass: same numbers
    chosen = net.compiled_step(graph[3], graph[4]).conv_algorithms()
    passes = [f"conv{i}:Conv2d {p}" for i in (1, 2) for p in ("forward", "backward filter")]
    assert sorted(chosen) == sorted(passes + ["conv2:Conv2d backward data"])
    assert set(chosen.values()) <= {"gemm", "conv3x3", "direct"}


def test_the_first_candidate_stays_unless_another_is_clearly_faster():
    class Timed:  # a device whose kernels take the seconds they are given
        def time_kernel(self, fn, arrays):
            return fn()

    def run(first, other):
        candidates = {"first": lambda: first, "other": lambda: other}
        return conv_ops._time_candidates(Timed(), candidates, ())

    assert run(1.0, 0.9) == "first"  # within the margin: noise must not flip the choice
    assert run(1.0, conv_ops.MARGIN * 0.99) == "other"
    assert run(0.5, 1.0) == "first"


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
@pytest.mark.parametrize(
    "channels,filters,first", [(4, 4, "conv3x3"), (64, 256, "gemm"), (256, 64, "gemm")]
)
def test_conv3x3_is_the_first_candidate_for_few_channels(
    monkeypatch, kind, channels, filters, first
):
    """3x3, stride 1, padding 1, on a CPU: conv3x3 is timed first (the one kept on a near tie)
    up to CONV3X3_FIRST_UP_TO channels and filters, gemm above (kernels/cpu/conv3x3.py and
    ops/conv_geometry.py say why); on a GPU gemm is first. The rule reads the device's kind: a CPU
    device that says "cuda" shows the GPU's order without running kernels on the simulator."""
    orders = []
    real = conv_ops._time_candidates
    monkeypatch.setattr(conv_ops, "BENCHMARKED", {})
    monkeypatch.setattr(
        conv_ops, "_time_candidates", lambda d, c, a: orders.append(list(c)) or real(d, c, a)
    )
    dev = device_module.create_cpu_device("64MiB")
    monkeypatch.setattr(dev, "kind", kind)
    x = tensor.from_numpy(np.ones((1, channels, 8, 8), np.float32), dev)
    conv = layer.Conv2d(channels, filters, 3, padding=1)
    monkeypatch.setattr(autograd, "training", False)
    conv(x)
    first = first if kind == "cpu" else "gemm"
    assert orders and all(order[0] == first and "conv3x3" in order for order in orders), orders


@pytest.mark.parametrize("kind", ["cpu", "planning for cpu", "cuda", "planning for cuda"])
def test_auto_sizes_its_workspace_for_its_first_candidate(monkeypatch, kind):
    """A forward pass's peak under "auto" is conv3x3's where conv3x3 is the first candidate (a
    CPU, and a planning device that plans a CPU's step), the gemm's where gemm is (a GPU: a
    CPU device that says "cuda" shows its sizing; a planning device for one), and conv3x3's is
    far the smaller: a planning device foresees the peak of the device it plans for."""
    monkeypatch.setattr(conv_ops, "BENCHMARKED", {})
    monkeypatch.setattr(autograd, "training", False)

    def peak(algorithm, kind=kind):
        if kind.startswith("planning for "):
            dev = device_module.create_planning_device(64 * 2**20, plans_for=kind.split()[-1])
        else:
            dev = device_module.create_cpu_device("64MiB")
            monkeypatch.setattr(dev, "kind", kind)
        x = tensor.PlaceHolder((4, 16, 8, 8), dev)
        x.copy_from_numpy(np.ones((4, 16, 8, 8), np.float32))  # (planning: allocates only)
        conv = layer.Conv2d(16, 16, 3, padding=1, algorithm=algorithm)
        conv(x)
        return dev.pool.stats()["high_water_bytes"]

    planes, columns = peak("conv3x3"), peak("gemm")
    assert planes < 0.6 * columns
    assert peak("auto") == (columns if kind.endswith("cuda") else planes)
    if kind.startswith("planning for "):
        assert peak("auto") == peak("auto", kind=kind.split()[-1])


def test_a_planning_device_plans_for_a_cpu_or_a_cuda_device():
    with pytest.raises(ValueError, match="plans_for='tpu'"):
        device_module.create_planning_device(plans_for="tpu")


# -- CUDA graphs: a replayed step as one launch (a real GPU only) ----------------------------
def test_a_step_replayed_as_a_cuda_graph_gives_the_numbers_of_kernel_by_kernel_replays(device):
    """Five steps with a learning-rate change after the third (a scalar the graph froze: it
    must be captured again): bit for bit the losses and states of replays kernel by kernel."""
    if device.kind != "cuda" or not device.use_cuda_graphs:
        pytest.skip("needs a real GPU: CUDA graphs do not exist on the CPU or the simulator")
    data = batches((4, 1, 16, 16), 5, classes=10)

    def run(use_graphs):
        dev = device_module.create_cuda_gpu("64MiB")
        dev.use_cuda_graphs = use_graphs
        dev.SetRandSeed(0)
        m = create_model("cnn", num_classes=10, num_channels=1)
        m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
        tx, ty = tensor.PlaceHolder((4, 1, 16, 16), dev), tensor.PlaceHolder((4,), dev, "int32")
        m.compile([tx], is_train=True, use_graph=True)
        losses = []
        for i, (x, y) in enumerate(data):
            if i == 3:
                m.optimizer.lr = 0.01
            tx.copy_from_numpy(x)
            ty.copy_from_numpy(y)
            losses.append(tensor.to_numpy(m(tx, ty)[1])[0])
        captured = len(dev._captured)
        return losses, {k: tensor.to_numpy(v) for k, v in m.get_states().items()}, captured

    graphs, plain = run(True), run(False)
    assert graphs[2] == 1 and plain[2] == 0  # the graph device did capture the step
    assert graphs[0] == plain[0]
    for key, value in plain[1].items():
        np.testing.assert_array_equal(graphs[1][key], value, err_msg=key)


def test_a_step_that_fails_after_batchnorm_ran_changes_no_state(device, monkeypatch):
    """The undo record (queued copies on a GPU, read after a Sync) puts BatchNorm's running
    statistics and the dropout counter back; no parameter was updated."""
    data = batches((2, 2, 4, 4), 2, classes=3)
    net = _Net()
    dev, tx, ty = train(net, data[:1], False, optimizer=opt.SGD(lr=0.05), dev=device)[2:]
    before = {k: tensor.to_numpy(v) for k, v in net.get_states().items()}
    counter = tensor.to_numpy(dev.dropout_counter)

    def fail(*args):
        raise RuntimeError("the loss failed")

    monkeypatch.setattr(net.loss, "forward", fail)
    tx.copy_from_numpy(data[1][0])
    with pytest.raises(RuntimeError, match="the loss failed"):
        net(tx, ty)
    after = {k: tensor.to_numpy(v) for k, v in net.get_states().items()}
    assert any("bn" in k for k in before) and before.keys() == after.keys()
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value, err_msg=key)
    np.testing.assert_array_equal(tensor.to_numpy(dev.dropout_counter), counter)


def test_an_event_recorded_after_failed_work_is_still_reached():
    dev = device.create_cpu_device("1MiB")
    stream, event = dev.create_stream(), dev.create_event()
    stream.submit(lambda: 1 / 0)
    event.record(stream)
    event.synchronize()  # returns: the marker runs although the work before it failed
    assert event.query()
    with pytest.raises(ZeroDivisionError):
        stream.synchronize()


def test_a_wait_is_for_the_record_made_before_it_as_in_cuda():
    dev = device.create_cpu_device("1MiB")
    a, b, event = dev.create_stream(), dev.create_stream(), dev.create_event()
    gate, seen = threading.Event(), []
    a.submit(gate.wait)
    event.record(a)  # record 1: after the gate
    event.wait(b)  # b waits for record 1 only
    event.record(b)  # record 2 on the waiting stream itself: must not deadlock
    b.submit(seen.append, "b ran")
    assert not event.query()
    gate.set()
    b.synchronize()
    assert seen == ["b ran"] and event.query()


# -- a simulated copy link on the CPU (the offload engine's test bench) ----------------------
def test_copies_on_a_slow_link_take_their_time_and_leave_the_host_free():
    dev = device.create_cpu_device("16MiB", link_gbps=0.05)  # 50 MB/s: 4 MB takes 80 ms
    t = tensor.Tensor((1 << 20,), dev).set_value(1.5)
    host = dev.pinned_array((1 << 20,), np.float32)
    done = dev.create_event()
    start = time.perf_counter()
    dev.copy_to_host_async(t, host, dev.copy_stream)
    done.record(dev.copy_stream)
    queued = time.perf_counter() - start
    assert not done.query(), "the copy finished at once: the link is not simulated"
    done.synchronize()
    took = time.perf_counter() - start
    assert took >= 4 * 2**20 / 0.05e9  # never faster than the link
    assert queued < took / 4  # the host went on while the copy ran
    assert (host == 1.5).all()


@pytest.mark.parametrize("speed", [0, -1, float("nan"), float("inf"), "8", True])
def test_a_bad_link_speed_is_a_clear_error(speed):
    with pytest.raises(ValueError, match="link_gbps"):
        device.create_cpu_device("1MiB", link_gbps=speed)


def test_the_host_pool_takes_its_size_from_the_environment(monkeypatch):
    monkeypatch.setenv("NNMEM_HOST_POOL_BYTES", "3MiB")
    assert device.create_cpu_device("8MiB").host.pool.capacity == 3 << 20
    monkeypatch.setenv("NNMEM_HOST_POOL_BYTES", "")  # unset or empty: four device pools
    assert device.create_cpu_device("8MiB").host.pool.capacity == 32 << 20
    monkeypatch.setenv("NNMEM_HOST_POOL_BYTES", "lots")
    with pytest.raises(ValueError, match="NNMEM_HOST_POOL_BYTES: cannot read 'lots'"):
        device.create_cpu_device("8MiB")
