"""A failed step changes nothing: parameters, optimizer state and BatchNorm's running statistics
are bit-identical to before it, and its memory goes back to the pool. And a device shared by
two threads gives each the numbers it would get alone."""

import gc
import signal
import sys
import threading

import numpy as np
import pytest
from training import batches

from nnmem import autograd, device, layer, model, opt, tensor
from nnmem.memory import OutOfMemory, Pool


class BNNet(model.Model):
    """Conv, BatchNorm (running statistics), ReLU, pooling, two dense layers."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(1, 4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.pool = layer.MaxPool2d(2, 2)
        self.flat = layer.Flatten()
        self.fc1 = layer.Linear(16)
        self.fc2 = layer.Linear(10)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(self.flat(self.pool(self.relu(self.bn(self.conv(x))))))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


# Each failed step is followed by gc.collect(): over the test's own objects only (conftest.py)
pytestmark = pytest.mark.usefixtures("frozen_heap")

DATA = batches((4, 1, 8, 8), 3, seed=1)


def setup(use_graph, optimizer=None, pool="64MiB", seed=0, **compile_options):
    dev = device.create_cpu_device(pool)
    dev.SetRandSeed(seed)
    m = BNNet()
    m.set_optimizer(optimizer or opt.SGD(lr=0.1, momentum=0.9, weight_decay=1e-3))
    tx = tensor.PlaceHolder(DATA[0][0].shape, dev)
    ty = tensor.PlaceHolder(DATA[0][1].shape, dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph, **compile_options)
    tx.copy_from_numpy(DATA[0][0])  # inputs allocated: what a step allocates is all its own
    ty.copy_from_numpy(DATA[0][1])
    return dev, m, tx, ty


def step(m, tx, ty, batch):
    tx.copy_from_numpy(batch[0])
    ty.copy_from_numpy(batch[1])
    return m(tx, ty)


def snapshot(m):
    """Everything a step may change: states (parameters, running statistics), the optimizer's
    state per parameter name, its step counter, and which parameters have state."""
    o = m.optimizer
    states = {k: tensor.to_numpy(v) for k, v in m.get_states().items()}
    moments = {}
    for p, state in o.moments.items():
        for i, t in enumerate(state if isinstance(state, tuple) else (state,)):
            moments[f"{p.name}[{i}]"] = tensor.to_numpy(t)
    return states, moments, o.get_states()["step_counter"]


def assert_same(a, b):
    assert a[2] == b[2], "step counter changed"
    for x, y in ((a[0], b[0]), (a[1], b[1])):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.fixture
def python_ctrl_c():
    """Python's own Ctrl-C handler for the test's duration. A shell starts a background job
    with SIGINT ignored (POSIX, without job control: `pytest &`, some CI runners), and then a
    raised SIGINT is dropped; nnmem leaves a handler it did not install alone
    (nnmem/interrupts.py), so these tests would see no KeyboardInterrupt at all."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def fail_and_forget(call, expected):
    """Run call(), which must raise `expected`; drop the exception and its frames."""
    try:
        call()
    except expected:
        pass
    else:
        raise AssertionError(f"{expected.__name__} was not raised")
    gc.collect()


def count_execs(dev, m, tx, ty, batch):
    """How many device.exec calls a step makes outside the optimizer's update phase."""
    calls = []
    original = dev.exec

    def counting(fn, reads, writes, name="", phase="forward", **kwargs):
        if phase != "update":
            calls.append(name)
        return original(fn, reads, writes, name=name, phase=phase, **kwargs)

    dev.exec = counting
    try:
        step(m, tx, ty, batch)
    finally:
        dev.exec = original
    return len(calls)


@pytest.mark.parametrize(
    "optimizer", [lambda: opt.SGD(lr=0.1, momentum=0.9), lambda: opt.Adam()], ids=["sgd", "adam"]
)
def test_eager_interrupt_at_any_kernel_before_the_update_changes_nothing(optimizer):
    for first_step in (True, False):
        dev, m, tx, ty = setup(False, optimizer())
        if not first_step:
            step(m, tx, ty, DATA[0])  # the optimizer's state exists already
        probe = setup(False, optimizer())
        if not first_step:
            step(*probe[1:], DATA[0])
        n = count_execs(*probe, DATA[1])
        assert n > 20
        for k in range(n):
            before, allocated = snapshot(m), dev.memory_stats()["allocated_bytes.current"]
            calls, original = [], dev.exec

            def interrupting(fn, reads, writes, phase="forward", **kwargs):
                if phase != "update":
                    calls.append(1)
                    if len(calls) == k + 1:
                        raise KeyboardInterrupt
                return original(fn, reads, writes, phase=phase, **kwargs)

            dev.exec = interrupting
            fail_and_forget(lambda: step(m, tx, ty, DATA[1]), KeyboardInterrupt)
            dev.exec = original
            assert_same(snapshot(m), before)
            assert dev.memory_stats()["allocated_bytes.current"] == allocated, f"kernel {k}"


@pytest.mark.parametrize("recycle", [True, False])
def test_eager_out_of_memory_at_any_allocation_changes_nothing_and_frees_the_step(recycle):
    dev, m, tx, ty = setup(False)
    dev.recycle = recycle
    reference = setup(False)
    step(*reference[1:], DATA[0])
    probe = setup(False)
    before_allocs = probe[0].memory_stats()["num_allocs"]
    step(*probe[1:], DATA[0])
    allocations = probe[0].memory_stats()["num_allocs"] - before_allocs
    assert allocations > 20  # the first step: activations, gradients and momentum buffers
    for k in range(allocations):
        before, allocated = snapshot(m), dev.memory_stats()["allocated_bytes.current"]
        calls, original = [], dev.pool.alloc

        def failing(nbytes, owner=None):
            calls.append(1)
            if len(calls) == k + 1:
                raise OutOfMemory(nbytes, 0, 0, dev.pool.capacity, nbytes=nbytes, requester=owner)
            return original(nbytes, owner)

        dev.pool.alloc = failing
        fail_and_forget(lambda: step(m, tx, ty, DATA[0]), OutOfMemory)
        dev.pool.alloc = original
        assert_same(snapshot(m), before)
        assert dev.memory_stats()["allocated_bytes.current"] == allocated, f"allocation {k}"
    step(m, tx, ty, DATA[0])  # and the model still trains to the reference's numbers
    assert_same(snapshot(m), snapshot(reference[1]))


def test_a_bad_label_changes_no_running_statistic_eager_and_graph():
    for use_graph in (False, True):
        dev, m, tx, ty = setup(use_graph)
        step(m, tx, ty, DATA[0])
        before = snapshot(m)
        bad = (DATA[1][0], np.full_like(DATA[1][1], 10))  # 10 classes: labels 0..9
        fail_and_forget(lambda: step(m, tx, ty, bad), ValueError)
        assert_same(snapshot(m), before)


def test_graph_interrupt_at_any_node_before_the_commit_changes_nothing():
    dev, m, tx, ty = setup(True)
    step(m, tx, ty, DATA[0])
    compiled = m.compiled_step(tx, ty)
    assert 0 < compiled.commit_start < len(compiled.calls)
    names = [name for name, _, _ in compiled.calls]
    assert all("update" in n or "step count" in n for n in names[compiled.commit_start :])
    assert not any("update" in n for n in names[: compiled.commit_start])
    for k in range(compiled.commit_start):
        before = snapshot(m)
        name, fn, arrays = compiled.calls[k]

        def interrupt(*_):
            raise KeyboardInterrupt

        compiled.calls[k] = (name, interrupt, arrays)
        fail_and_forget(lambda: step(m, tx, ty, DATA[1]), KeyboardInterrupt)
        compiled.calls[k] = (name, fn, arrays)
        assert_same(snapshot(m), before)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is raised with signal.raise_signal")
@pytest.mark.parametrize("use_graph", [False, True])
def test_ctrl_c_during_the_update_waits_until_every_parameter_is_updated(use_graph, python_ctrl_c):
    dev, m, tx, ty = setup(use_graph)
    ref = setup(use_graph)
    for batch in DATA[:2]:
        step(m, tx, ty, batch)
        step(*ref[1:], batch)
    step(*ref[1:], DATA[2])
    expected = snapshot(ref[1])

    def ctrl_c_then(fn):
        def kernel(*arrays):
            signal.raise_signal(signal.SIGINT)  # as if the user pressed Ctrl-C right now
            fn(*arrays)

        return kernel

    if use_graph:
        compiled = m.compiled_step(tx, ty)
        name, fn, arrays = compiled.calls[compiled.commit_start]
        compiled.calls[compiled.commit_start] = (name, ctrl_c_then(fn), arrays)
    else:
        original = dev.exec

        def exec_(fn, reads, writes, phase="forward", **kwargs):
            if phase == "update" and not getattr(exec_, "done", False):
                exec_.done, fn = True, ctrl_c_then(fn)
            return original(fn, reads, writes, phase=phase, **kwargs)

        dev.exec = exec_
    fail_and_forget(lambda: step(m, tx, ty, DATA[2]), KeyboardInterrupt)
    assert_same(snapshot(m), expected)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_failed_step_with_recycling_off_gives_back_its_working_set():
    dev, m, tx, ty = setup(False, pool="8MiB")
    dev.recycle = False
    step(m, tx, ty, DATA[0])
    allocated = dev.memory_stats()["allocated_bytes.current"]
    bad = (DATA[1][0], np.full_like(DATA[1][1], 10))
    for _ in range(50):  # would fill the pool if each failed step kept its blocks
        fail_and_forget(lambda: step(m, tx, ty, bad), ValueError)
        assert dev.memory_stats()["allocated_bytes.current"] == allocated


def test_recycling_off_keeps_a_steps_blocks_until_it_ends_then_frees_them():
    dev, m, tx, ty = setup(False)
    dev.recycle = False
    step(m, tx, ty, DATA[0])
    start = dev.memory_stats()
    step(m, tx, ty, DATA[1])
    end = dev.memory_stats()
    assert end["allocated_bytes.current"] == start["allocated_bytes.current"]
    assert end["allocated_bytes.peak"] > 2 * start["allocated_bytes.current"]
    dev.recycle = True
    dev.reset_peak_memory_stats()
    step(m, tx, ty, DATA[2])
    assert dev.memory_stats()["allocated_bytes.peak"] < end["allocated_bytes.peak"]


# -- threads ------------------------------------------------------------------------------------
@pytest.fixture
def fast_thread_switches():
    """Switch threads as often as possible, so that races show up in a short test."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def train_alone(use_graph, seed, data):
    dev, m, tx, ty = setup(use_graph, seed=seed)
    return [float(tensor.to_numpy(step(m, tx, ty, b)[1])[0]) for b in data], snapshot(m)


@pytest.mark.parametrize("use_graph", [False, True])
def test_two_threads_training_two_models_on_one_device_get_their_own_numbers(
    use_graph, fast_thread_switches
):
    data = [batches((4, 1, 8, 8), 20, seed=s) for s in (2, 3)]
    expected = [train_alone(use_graph, seed, d) for seed, d in zip((0, 1), data)]
    dev = device.create_cpu_device("64MiB")
    runs = []
    for seed in (0, 1):
        dev.SetRandSeed(seed)
        m = BNNet()
        m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9, weight_decay=1e-3))
        tx = tensor.PlaceHolder((4, 1, 8, 8), dev)
        ty = tensor.PlaceHolder((4,), dev, tensor.int32)
        m.compile([tx], is_train=True, use_graph=use_graph)
        runs.append((m, tx, ty))
    results, errors, start = [None, None], [], threading.Barrier(2)

    def worker(i):
        try:
            m, tx, ty = runs[i]
            start.wait()
            losses = [float(tensor.to_numpy(step(m, tx, ty, b)[1])[0]) for b in data[i]]
            results[i] = (losses, snapshot(m))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for got, want in zip(results, expected):
        assert got[0] == want[0]
        assert_same(got[1], want[1])


def test_a_second_threads_step_waits_until_the_first_has_ended():
    dev = device.create_cpu_device("64MiB")
    runs = []
    for _ in range(2):
        m = BNNet()
        m.set_optimizer(opt.SGD(lr=0.1))
        tx = tensor.PlaceHolder((4, 1, 8, 8), dev)
        ty = tensor.PlaceHolder((4,), dev, tensor.int32)
        m.compile([tx], is_train=True, use_graph=True)
        step(m, tx, ty, DATA[0])
        runs.append((m, tx, ty))
    inside, second_ran, seen = threading.Event(), threading.Event(), []

    def patch(i, before):
        compiled = runs[i][0].compiled_step(*runs[i][1:])
        name, fn, arrays = compiled.calls[0]

        def kernel(*a):
            before()
            fn(*a)

        compiled.calls[0] = (name, kernel, arrays)

    # The first step parks in its first kernel until the second step ran one (or 0.5 s).
    patch(0, lambda: (inside.set(), seen.append(second_ran.wait(0.5))))
    patch(1, second_ran.set)
    first = threading.Thread(target=step, args=(*runs[0], DATA[1]))
    first.start()
    assert inside.wait(5)
    second = threading.Thread(target=step, args=(*runs[1], DATA[1]))
    second.start()
    first.join()
    second.join()
    assert seen == [False], "the second step ran a kernel in the middle of the first"
    assert second_ran.is_set()


def test_evaluating_in_one_thread_does_not_switch_off_training_in_another(fast_thread_switches):
    data = batches((4, 1, 8, 8), 8, seed=4)
    expected = train_alone(False, 0, data)
    dev, m, tx, ty = setup(False, seed=0)
    autograd.training = False  # m(...) switches it on for its step only
    other = BNNet()
    x = tensor.from_numpy(data[0][0], device.create_cpu_device("16MiB"))
    other.compile([x], is_train=False)
    stop, errors = threading.Event(), []

    def evaluate():
        try:
            while not stop.is_set():
                other.eval()
                other(x)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=evaluate)
    thread.start()
    try:
        losses = [float(tensor.to_numpy(step(m, tx, ty, b)[1])[0]) for b in data]
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert autograd.training is False  # this thread's own value, put back after each step
    assert losses == expected[0]
    assert_same(snapshot(m), expected[1])


def test_the_pool_survives_threads_allocating_and_freeing_at_once(fast_thread_switches):
    pool = Pool(64 * 2**20)
    errors = []

    def churn(seed):
        rng = np.random.default_rng(seed)
        mine = []
        try:
            for _ in range(3000):
                if mine and rng.random() < 0.5:
                    pool.free(mine.pop(rng.integers(len(mine))))
                else:
                    mine.append(pool.alloc(int(rng.integers(1, 4096))))
            for offset in mine:
                pool.free(offset)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=churn, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stats = pool.stats()
    assert stats["allocated_bytes.current"] == 0 and stats["active_blocks"] == 0
    assert pool.segments() == [(0, pool.capacity, True)]
    assert stats["num_allocs"] == stats["num_frees"]


# -- review findings ----------------------------------------------------------------------------
class Teacher(BNNet):
    pass


class Student(BNNet):
    """Distillation: a teacher in inference mode is called inside the student's step."""

    def __init__(self, teacher):
        super().__init__()
        self.teacher = teacher

    def train_one_batch(self, x, y):
        self.teacher(x)  # eval() mode: it must not switch off the student's autograd
        return super().train_one_batch(x, y)


def test_a_model_called_inside_another_models_step_keeps_the_callers_training():
    for use_graph in (False, True):
        dev, _, tx, ty = setup(use_graph)
        teacher = Teacher()
        teacher.compile([tx], is_train=False)
        teacher.eval()
        student = Student(teacher)
        student.set_optimizer(opt.SGD(lr=0.1))
        student.compile([tx], is_train=True, use_graph=use_graph)
        autograd.training = False
        _, loss = step(student, tx, ty, DATA[1])
        assert np.isfinite(tensor.to_numpy(loss)).all()
        assert autograd.training is False  # the caller's value, put back


class MetricAfterUpdate(BNNet):
    """Computes a second loss after the optimizer: in eager mode it runs after the commit."""

    def train_one_batch(self, x, y):
        out, loss = super().train_one_batch(x, y)
        self.loss(out, self._check_labels)
        return out, loss


def test_work_after_the_commit_that_fails_leaves_the_step_applied_in_eager_mode():
    dev, m, tx, ty = setup(False)
    reference = setup(False)
    m.__class__ = MetricAfterUpdate
    m._check_labels = tensor.from_numpy(np.full(4, 99, np.int32), dev)  # out of range
    fail_and_forget(lambda: step(m, tx, ty, DATA[1]), ValueError)
    step(*reference[1:], DATA[1])
    assert_same(snapshot(m), snapshot(reference[1]))  # whole step: parameters and statistics


def test_an_interrupt_while_the_arena_grows_leaves_it_on_live_bytes():
    dev, a, tx, ty = setup(True)
    step(a, tx, ty, DATA[0])
    big = BNNet()
    big.set_optimizer(opt.SGD(lr=0.1))
    bx = tensor.PlaceHolder((16, 1, 8, 8), dev)
    by = tensor.PlaceHolder((16,), dev, tensor.int32)
    big.compile([bx], is_train=True, use_graph=True)
    bx.set_value(0)
    by.set_value(0)
    original = dev.pool.alloc

    def interrupted(nbytes, owner=None):
        if owner == dev.graph_arena.OWNER and not interrupted.done:
            interrupted.done = True  # one Ctrl-C, while the arena moves
            raise KeyboardInterrupt
        return original(nbytes, owner)

    interrupted.done = False

    dev.pool.alloc = interrupted
    fail_and_forget(lambda: big(bx, by), KeyboardInterrupt)
    dev.pool.alloc = original
    assert dev.graph_arena.offset in {offset for offset, _, _ in dev.pool.live_blocks()}
    bystander = tensor.Tensor((1024,), dev).set_value(7.0)  # would land on freed arena bytes
    assert (tensor.to_numpy(bystander) == 7.0).all()


def test_a_retry_inside_except_out_of_memory_gets_the_memory_back():
    dev = device.create_cpu_device("3MiB")
    m = BNNet()
    m.set_optimizer(opt.SGD(lr=0.1))
    big = tensor.PlaceHolder((64, 1, 28, 28), dev)
    big.copy_from_numpy(np.zeros((64, 1, 28, 28), np.float32))
    m.compile([big], is_train=True)
    labels = tensor.from_numpy(np.zeros(64, np.int32), dev)
    small = tensor.from_numpy(np.zeros((32, 1, 28, 28), np.float32), dev)
    small_labels = tensor.from_numpy(np.zeros(32, np.int32), dev)
    try:
        m(big, labels)
    except OutOfMemory:
        m(small, small_labels)  # a smaller batch, while the exception is still alive
    else:
        raise AssertionError("the big batch was expected not to fit")


def test_a_first_graph_step_that_does_not_fit_keeps_no_optimizer_state():
    dev = device.create_cpu_device("1MiB")  # the parameters fit, the step's arena does not
    m = BNNet()
    m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    tx = tensor.PlaceHolder((64, 1, 28, 28), dev)
    ty = tensor.PlaceHolder((64,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True)
    tx.set_value(0)
    ty.set_value(0)
    allocated = dev.memory_stats()["allocated_bytes.current"]
    fail_and_forget(lambda: m(tx, ty), OutOfMemory)
    assert m.optimizer.moments == {} and m.optimizer.get_states()["step_counter"] == 0
    assert dev.memory_stats()["allocated_bytes.current"] == allocated


class _BNDropNet(BNNet):
    """BatchNorm and dropout; its step calls the optimizer (by_call) or, as SINGA's examples
    do, its backward_and_update."""

    def __init__(self, by_call):
        super().__init__()
        self.drop, self.by_call = layer.Dropout(0.5), by_call

    def forward(self, x):
        x = self.flat(self.pool(self.relu(self.bn(self.conv(x)))))
        return self.fc2(self.drop(self.relu(self.fc1(x))))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        if self.by_call:
            self.optimizer(loss)
        else:
            self.optimizer.backward_and_update(loss)
        return out, loss


@pytest.mark.parametrize("by_call", [True, False], ids=["call", "backward_and_update"])
@pytest.mark.parametrize("use_graph", [False, True])
def test_a_step_without_an_optimizer_is_refused_and_changes_nothing(use_graph, by_call):
    """Training before set_optimizer says what to do. Forward has run by then (or has been
    recorded): the undo puts back BatchNorm's running statistics and dropout's draw, keeps no
    graph and gives the memory back; with the optimizer set, the model then trains as one
    that had it from the start."""

    def run(without_first):
        dev = device.create_cpu_device("64MiB")
        dev.SetRandSeed(0)
        m = _BNDropNet(by_call)
        tx = tensor.PlaceHolder(DATA[0][0].shape, dev)
        ty = tensor.PlaceHolder(DATA[0][1].shape, dev, tensor.int32)
        m.compile([tx], is_train=True, use_graph=use_graph)
        tx.copy_from_numpy(DATA[0][0])
        ty.copy_from_numpy(DATA[0][1])
        if without_first:
            states = {k: tensor.to_numpy(v) for k, v in m.get_states().items()}
            allocated = dev.memory_stats()["allocated_bytes.current"]
            for _ in range(2):  # the second call as the first: nothing was kept
                with pytest.raises(RuntimeError, match=r"no optimizer: call model.set_optimizer"):
                    step(m, tx, ty, DATA[0])
                gc.collect()
                assert len(m._graphs) == 0
                for k, v in m.get_states().items():
                    np.testing.assert_array_equal(tensor.to_numpy(v), states[k], err_msg=k)
                assert dev.memory_stats()["allocated_bytes.current"] == allocated
        m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
        for batch in DATA[:2]:
            step(m, tx, ty, batch)
        return snapshot(m)

    assert_same(run(True), run(False))


@pytest.mark.parametrize("options", [{}, {"offload": "all"}, {"recompute": "memory"}])
@pytest.mark.parametrize("arena", ["its-own", "shared"])
def test_a_first_graph_step_that_fails_while_it_runs_keeps_nothing(options, arena):
    """A bad label found by the first replay: the graph, its arena and the optimizer state
    made for it are dropped, as when its plan does not fit; the next steps record again.
    "shared": an inference graph is in the device's arena already, and the arena the failed
    step grew shrinks back to that graph's plan."""
    dev, m, tx, ty = setup(True, **options)
    if arena == "shared":
        m.eval()
        m(tx)
        m.train()
    arena_bytes = dev.graph_arena.size
    before, allocated = snapshot(m), dev.memory_stats()["allocated_bytes.current"]
    bad = (DATA[0][0], np.full_like(DATA[0][1], 10))  # 10 classes: labels 0..9
    with pytest.raises(ValueError):
        try:
            step(m, tx, ty, bad)
        except ValueError:  # the traceback still holds the compiled step, not its arena
            assert dev.graph_arena.size == arena_bytes
            raise
    gc.collect()
    assert_same(snapshot(m), before)
    assert m.optimizer.moments == {} and len(m._graphs) == (arena == "shared")
    assert dev.memory_stats()["allocated_bytes.current"] == allocated
    reference = setup(True, **options)
    for batch in DATA:
        step(m, tx, ty, batch)
        step(*reference[1:], batch)
    assert_same(snapshot(m), snapshot(reference[1]))


class DropNet(BNNet):
    def __init__(self):
        super().__init__()
        self.drop = layer.Dropout(0.5)

    def forward(self, x):
        return self.fc2(self.drop(self.relu(self.fc1(self.flat(self.pool(self.conv(x)))))))


@pytest.mark.parametrize("use_graph", [False, True])
def test_a_failed_step_draws_no_dropout_mask(use_graph):
    runs = []
    for fail in (False, True):
        dev = device.create_cpu_device("64MiB")
        dev.SetRandSeed(0)
        m = DropNet()
        m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
        tx = tensor.PlaceHolder((4, 1, 8, 8), dev)
        ty = tensor.PlaceHolder((4,), dev, tensor.int32)
        m.compile([tx], is_train=True, use_graph=use_graph)
        step(m, tx, ty, DATA[0])
        if fail:
            bad = (DATA[1][0], np.full_like(DATA[1][1], 10))
            fail_and_forget(lambda: step(m, tx, ty, bad), ValueError)
        step(m, tx, ty, DATA[1])
        runs.append(snapshot(m))
    assert_same(runs[0], runs[1])


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is raised with signal.raise_signal")
def test_ctrl_c_while_a_step_releases_its_blocks_leaks_nothing(python_ctrl_c):
    dev, m, tx, ty = setup(False)
    dev.recycle = False
    step(m, tx, ty, DATA[0])
    allocated = dev.memory_stats()["allocated_bytes.current"]
    original, frees = dev.pool.free, []

    def free(offset):
        frees.append(offset)
        if len(frees) == 3:  # the end of the step is releasing the kept blocks
            signal.raise_signal(signal.SIGINT)
        return original(offset)

    dev.pool.free = free
    fail_and_forget(lambda: step(m, tx, ty, DATA[1]), KeyboardInterrupt)
    dev.pool.free = original
    assert len(frees) > 3
    assert dev.memory_stats()["allocated_bytes.current"] == allocated


def test_two_threads_first_writes_to_one_tensor_allocate_it_once(fast_thread_switches):
    dev = device.create_cpu_device("16MiB")

    def first_write(t, together, value):
        together.wait()  # both threads at the tensor's first write at once
        t.set_value(value)

    for _ in range(200):
        t, together = tensor.Tensor((1024,), dev), threading.Barrier(2)
        threads = [threading.Thread(target=first_write, args=(t, together, v)) for v in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert dev.memory_stats()["active_blocks"] == 1
        del t
    assert dev.memory_stats()["allocated_bytes.current"] == 0


def test_patching_training_in_a_test_puts_the_value_back():
    from unittest import mock

    autograd.training = True
    with mock.patch.object(autograd, "training", False):
        assert autograd.training is False
    assert autograd.training is True


class _DropNet(model.Model):
    """Dropout, then a dense layer; fails once after dropout drew its mask, if asked to."""

    def __init__(self, fail):
        super().__init__()
        self.fail = fail
        self.drop, self.flat = layer.Dropout(0.5), layer.Flatten()
        self.linear, self.loss = layer.Linear(3), layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.linear(self.flat(self.drop(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        if self.fail:
            self.fail = False
            raise RuntimeError("after dropout")
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


@pytest.mark.parametrize("compile_first", [True, False])
def test_a_failed_first_step_leaves_no_dropout_draw_behind(compile_first):
    """The dropout counter is made by the first draw, inside the step: a failed first step
    puts it back to 0, so the retry draws the masks a clean first step draws."""

    def run(fail):
        dev = device.create_cpu_device("16MiB")
        dev.SetRandSeed(0)
        m = _DropNet(fail)
        m.set_optimizer(opt.SGD(lr=0.1))
        ((x, y),) = batches((4, 2, 3, 3), 1, classes=3)
        tx, ty = tensor.from_numpy(x, dev), tensor.from_numpy(y, dev)
        if compile_first:
            m.compile([tx], is_train=False, use_graph=False)
            m.train()
        if fail:
            fail_and_forget(lambda: m(tx, ty), RuntimeError)
        loss = tensor.to_numpy(m(tx, ty)[1])[0]
        return loss, int(tensor.to_numpy(dev.dropout_counter)[0])

    assert run(True) == run(False)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is raised with signal.raise_signal")
@pytest.mark.parametrize("use_graph", [False, True])
def test_a_second_ctrl_c_during_the_undo_waits_for_it_to_end(use_graph, python_ctrl_c):
    """The first Ctrl-C comes late in backward; the second while the undo writes BatchNorm's
    statistics back. The undo ends first (it left them half-written), then the interrupt."""
    dev, m, tx, ty = setup(use_graph)
    ref = setup(use_graph)
    for model_and_inputs in ((m, tx, ty), ref[1:]):
        step(*model_and_inputs, DATA[0])
    before = snapshot(m)
    armed = []
    if use_graph:
        compiled = m.compiled_step(tx, ty)
        k = compiled.commit_start - 1
        name, fn, arrays = compiled.calls[k]

        def first_ctrl_c(*arrays):
            armed.append(1)
            signal.raise_signal(signal.SIGINT)

        compiled.calls[k] = (name, first_ctrl_c, arrays)
    else:
        original_exec = dev.exec

        def exec_(fn, reads, writes, phase="forward", **kwargs):
            if phase == "backward" and not armed:
                armed.append(1)
                signal.raise_signal(signal.SIGINT)
            return original_exec(fn, reads, writes, phase=phase, **kwargs)

        dev.exec = exec_
    original_write, undo_writes = dev._write_from_host, []

    def write(t, value):
        if armed:  # the step's inputs were written before: these are the undo's writes
            undo_writes.append(t.name)
            if len(undo_writes) == 1:
                signal.raise_signal(signal.SIGINT)  # the second Ctrl-C, at the first of them
        return original_write(t, value)

    dev._write_from_host = write
    with pytest.raises(KeyboardInterrupt, match="the failed step was undone first"):
        step(m, tx, ty, DATA[1])
    gc.collect()
    dev._write_from_host = original_write
    if use_graph:
        compiled.calls[k] = (name, fn, arrays)
    else:
        dev.exec = original_exec
    assert undo_writes == ["bn.running_mean", "bn.running_var"]  # on past the second Ctrl-C
    assert_same(snapshot(m), before)
    for model_and_inputs in ((m, tx, ty), ref[1:]):
        step(*model_and_inputs, DATA[1])
    assert_same(snapshot(m), snapshot(ref[1]))


@pytest.mark.parametrize("use_graph", [False, True])
def test_a_gradient_of_the_wrong_size_is_refused_before_any_update(use_graph, monkeypatch):
    """An operator whose backward returns a wrong shape: the update kernel would refuse it in
    the commit, after other parameters were updated. It is refused before the commit."""
    dev, m, tx, ty = setup(use_graph)
    if not use_graph:
        step(m, tx, ty, DATA[0])  # optimizer state exists; graph mode records the next step
    before = snapshot(m)
    original = autograd.backward

    def backward(loss):
        pairs = list(original(loss))
        param, grad = pairs[0]
        pairs[0] = (param, tensor.from_numpy(np.zeros(grad.shape[:-1], np.float32), dev))
        return iter(pairs)

    monkeypatch.setattr(autograd, "backward", backward)
    with pytest.raises(ValueError, match="gradients of another size than their parameters"):
        step(m, tx, ty, DATA[1])
    assert_same(snapshot(m), before)
