"""Data-parallel training over MPI (nnmem.dist_opt, nnmem.communicator).

The acceptance test runs tests/dist_worker.py on 2 ranks with mpiexec (from the mpich wheel
beside mpi4py): with batch B on each rank, a step must be the step of one process with batch
2B. The exchanges' own semantics (fusing, float16, sparsification and its residual) are
checked in this process too, in MPI's one-rank world, against NumPy.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="mpi4py is absent: pip install 'nnmem[mpi]'")

import dist_worker  # noqa: E402 (tests/ is on sys.path: the program the ranks run)
from training import GradientIsInput  # noqa: E402

from nnmem import device, opt, tensor  # noqa: E402
from nnmem.communicator import Communicator, DistributedError  # noqa: E402
from nnmem.data import shard  # noqa: E402

WORKER = Path(__file__).with_name("dist_worker.py")


def launcher():
    """mpiexec: the one beside this Python (mpich's wheel), else the one on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec beside mpi4py: pip install 'nnmem[mpi]' installs mpich's")
    return found


def mpiexec(*args, timeout=240):
    """Run the worker on 2 ranks; (exit status, output).

    A job that failed without a byte of output (no rank's message, not even the launcher's) is
    run once more: once in CI, the "stuck" job below ended that way beside the simulator's
    tests, and 49 runs here under load (busy loops, or the simulator beside) never did. nnmem
    prints on every path it fails by, so an empty failure is the launcher's; a second one
    fails the test with both statuses."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_"))}
    statuses = []
    for _ in range(2):
        done = subprocess.run(
            [launcher(), "-n", "2", sys.executable, str(WORKER), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=WORKER.parent,
        )
        output = done.stdout + done.stderr
        statuses.append(done.returncode)
        if done.returncode == 0 or output:
            return done.returncode, output
    return done.returncode, f"(no output; exit statuses {statuses})"


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    status, output = mpiexec("train", out)
    assert status == 0, output
    return [dict(np.load(out / f"rank{r}.npz")) for r in range(2)]


def single_process(name):
    """The configuration `name` trained by one process with batch 2B, the ranks' two batches
    side by side: (losses, states)."""
    options, _, _, _ = dist_worker.CONFIGS[name]
    x, y = dist_worker.data_set()
    parts = [shard((x, y), r, 2) for r in range(2)]
    b = dist_worker.BATCH
    dev = device.create_cpu_device("256MiB")
    dev.SetRandSeed(0)  # rank 0's seed: its parameters are the ones broadcast
    model = dist_worker.DistCNN()
    model.set_optimizer(opt.SGD(**dist_worker.LR))
    tx = tensor.PlaceHolder((2 * b, 1, 28, 28), dev)
    ty = tensor.PlaceHolder((2 * b,), dev, tensor.int32)
    model.compile([tx], is_train=True, **options)
    model.train_one_batch = lambda x, y, *rest: model.__class__.__bases__[0].train_one_batch(
        model, x, y
    )
    losses = []
    for step in range(dist_worker.STEPS):
        rows = slice(step * b, (step + 1) * b)
        tx.copy_from_numpy(np.concatenate([p[0][rows] for p in parts]))
        ty.copy_from_numpy(np.concatenate([p[1][rows] for p in parts]))
        _, loss = model(tx, ty)
        losses.append(tensor.to_numpy(loss)[0])
    return losses, {k: tensor.to_numpy(v) for k, v in model.get_states().items()}


def states_of(saved, name):
    prefix = f"{name}/state/"
    return {k[len(prefix) :]: v for k, v in saved.items() if k.startswith(prefix)}


EXACT = [n for n, c in dist_worker.CONFIGS.items() if c[1] == "plain"]


@pytest.mark.parametrize("name", EXACT)
def test_two_ranks_with_batch_b_step_as_one_process_with_batch_2b(two_ranks, name):
    losses, states = single_process(name)
    rank_losses = [saved[f"{name}/losses"] for saved in two_ranks]
    # the 2B loss is the mean of the ranks' B losses; float32 sums in another order
    np.testing.assert_allclose(np.mean(rank_losses, axis=0), losses, rtol=2e-5)
    for rank, saved in enumerate(two_ranks):
        mine = states_of(saved, name)
        assert mine.keys() == states.keys()
        for k in states:
            np.testing.assert_allclose(mine[k], states[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("name", [n for n in dist_worker.CONFIGS if n != "partial"])
def test_every_rank_ends_with_the_same_parameters(two_ranks, name):
    a, b = (states_of(saved, name) for saved in two_ranks)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_half_precision_and_sparsification_send_fewer_bytes(two_ranks):
    sent = {n: int(two_ranks[0][f"{n}/wire_bytes"]) for n in dist_worker.CONFIGS}
    params = sum(v.size for v in states_of(two_ranks[0], "graph").values())
    # plain: every gradient element once per step, 4 bytes; half: 2 bytes
    assert sent["graph"] == 4 * params * dist_worker.STEPS
    assert sent["half"] == 2 * params * dist_worker.STEPS
    # top-K with spars 0.1: a tenth of the elements, as (index, value) pairs of 8 bytes
    assert sent["sparse-topk"] < 0.11 * 8 * params * dist_worker.STEPS


def test_half_precision_steps_close_to_full_precision(two_ranks):
    full, half = (states_of(two_ranks[0], n) for n in ("graph", "half"))
    for k in full:
        np.testing.assert_allclose(half[k], full[k], rtol=0.02, atol=2e-4, err_msg=k)


def test_partial_update_averages_one_partition_a_step(two_ranks):
    """threshold 30000: the partitions are [linear2, linear1.b...] as the gradients come,
    linear1.W alone, and conv1 + conv2 together; after 3 steps each was averaged once, at
    its step, and has drifted apart since, except the last one averaged."""
    a, b = (states_of(saved, "partial") for saved in two_ranks)
    same = sorted(k for k in a if np.array_equal(a[k], b[k]))
    assert same and len(same) < len(a), same
    assert all(k.startswith(("conv1", "conv2")) for k in same), same


def test_sparse_training_lowers_the_loss(two_ranks):
    for name in ("sparse-topk", "sparse-threshold"):
        losses = two_ranks[0][f"{name}/losses"]
        assert losses[-1] < losses[0], (name, losses)


def test_different_models_fail_on_every_rank_naming_the_difference():
    status, output = mpiexec("mismatch", ".", 30, timeout=120)
    assert status != 0
    for rank in (0, 1):
        assert f"rank {rank} DistributedError" in output, output
    assert "linear1.W" in output and "every rank must build the same model" in output, output


@pytest.mark.parametrize("mode", ["dies", "dies-early", "stuck"])
def test_a_rank_that_stops_makes_the_others_fail_within_the_timeout(mode):
    """A rank that exits ("dies") ends the job either way (the launcher stops the others when
    one exits with an error, perhaps before rank 0's abort prints); a rank that is stuck
    ("stuck") is stopped only by rank 0's MPI_Abort at exit, long before it would wake."""
    start = time.monotonic()
    status, output = mpiexec(mode, ".", 3, timeout=120)
    elapsed = time.monotonic() - start
    seen = f"exit status {status} after {elapsed:.1f} s:\n{output}"
    assert status != 0, seen
    assert "rank 0 DistributedError" in output, seen
    assert "did not complete within 3 s" in output, seen
    assert elapsed < dist_worker.STUCK_S / 2, seen


def test_nnmem_train_under_mpiexec_prints_and_saves_on_rank_0_only(tmp_path):
    nnmem = Path(sys.executable).with_name("nnmem")
    if not nnmem.exists():
        pytest.skip("the nnmem command comes with pip install -e '.[test]'")
    saved = tmp_path / "states.zip"
    done = subprocess.run(
        [launcher(), "-n", "2", nnmem, "train", "--epochs", "1", "--max-batches", "3"]
        + ["--dist-option", "half", "--save-states", saved],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("epoch 1:") == 1, done.stdout  # rank 0 alone prints
    assert "2 ranks (batch 64 and " in done.stdout and "dist option half" in done.stdout
    assert saved.exists() and saved.stat().st_size > 0


# -- one rank, in this process ------------------------------------------------------------
@pytest.fixture(scope="module")
def communicator():
    return Communicator(timeout=30)


@pytest.fixture
def fresh_communicator():
    """A communicator a test may break; mended afterwards, so that this process is not
    aborted at exit."""
    comm = Communicator(timeout=30)
    yield comm
    comm._broken = None


def test_one_rank_trains_as_the_wrapped_optimizer(communicator):
    from training import assert_identical, batches, train

    from nnmem.models.cnn import CNN

    data = batches((4, 1, 28, 28), 2)
    for graph in (False, True):
        alone = train(CNN(), data, graph)
        wrapped = opt.DistOpt(
            opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4), communicator=communicator
        )
        assert_identical(alone, train(CNN(), data, graph, optimizer=wrapped))


class Exchanging(GradientIsInput):
    """W's gradient is the input; the step calls DistOpt's `method` with `options`."""

    def __init__(self, w0, method, **options):
        super().__init__(w0)
        self.method, self.options = method, options

    def train_one_batch(self, x):
        y = self.forward(x)
        getattr(self.optimizer, self.method)(y, **self.options)
        return y


def exchanged(communicator, grads, use_graph, method, **options):
    """-W after one SGD(lr=1) step per gradient in `grads` through DistOpt's `method` on
    one rank, W starting at 0: the sum of what the exchanges delivered. (-W, the DistOpt)."""
    dist = opt.DistOpt(opt.SGD(lr=1.0), communicator=communicator)
    m = Exchanging(np.zeros_like(grads[0]), method, **options)
    m.set_optimizer(dist)
    tx = tensor.PlaceHolder(grads[0].shape, device.create_cpu_device("16MiB"))
    m.compile([tx], is_train=True, use_graph=use_graph)
    for g in grads:
        tx.copy_from_numpy(g)
        m(tx)
    return -tensor.to_numpy(m.scaled.W), dist


def top_k_reference(grads, fraction):
    """What top-K sparsification with error feedback delivers in total, and the residual."""
    delivered = residual = np.zeros_like(grads[0])
    for g in grads:
        c = g + residual
        k = int(np.ceil(fraction * c.size))
        chosen = np.argsort(-np.abs(c), kind="stable")[:k]
        sent = np.zeros_like(c)
        sent[chosen] = c[chosen]
        delivered, residual = delivered + sent, c - sent
    return delivered, residual


@pytest.mark.parametrize("use_graph", [False, True])
def test_top_k_sends_the_largest_and_keeps_the_rest_for_the_next_step(communicator, use_graph):
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(40).astype(np.float32) for _ in range(3)]
    got, dist = exchanged(
        communicator, grads, use_graph, "backward_and_sparse_update", spars=0.2, topK=True
    )
    delivered, residual = top_k_reference(grads, 0.2)
    np.testing.assert_allclose(got, delivered, rtol=1e-6)
    (kept,) = dist._exchanges.residuals.values()
    np.testing.assert_allclose(kept, residual, rtol=1e-6, atol=1e-7)


def test_threshold_sparsification_sends_what_reaches_it(communicator):
    g = np.array([0.5, -3.0, 0.1, 2.0, -0.2, 0.05, 1.0, -0.01], np.float32)
    got, dist = exchanged(
        communicator, [g], False, "backward_and_sparse_update", spars=0.5, corr=False
    )
    np.testing.assert_array_equal(got, np.where(np.abs(g) >= 0.5, g, 0))
    assert not dist._exchanges.residuals  # corr=False keeps nothing


def test_half_rounds_to_float16_on_the_wire_and_clips(communicator):
    g = np.array([1 / 3, 1e-3, 70000.0, -2.5], np.float32)
    got, _ = exchanged(
        communicator, [g], True, "backward_and_update_half", clipping=True, clip_Value=100
    )
    np.testing.assert_array_equal(got, np.clip(g, -100, 100).astype(np.float16).astype(np.float32))


def test_a_failed_exchange_changes_nothing_and_stops_the_job(fresh_communicator, monkeypatch):
    """The parameters and residuals are as before the failed step; the ranks can no longer
    agree on the next collective (this one may have failed alone), so the communicator
    refuses to go on, and the job is aborted at exit."""
    comm = fresh_communicator
    grads = [np.linspace(-1, 1, 16, dtype=np.float32), np.linspace(2, -2, 16, dtype=np.float32)]
    dist = opt.DistOpt(opt.SGD(lr=1.0, momentum=0.9), communicator=comm)
    m = Exchanging(np.zeros(16, np.float32), "backward_and_sparse_update", spars=0.25, topK=True)
    m.set_optimizer(dist)
    tx = tensor.PlaceHolder((16,), device.create_cpu_device("16MiB"))
    m.compile([tx], is_train=True, use_graph=True)
    tx.copy_from_numpy(grads[0])
    m(tx)
    w, (residual,) = (
        tensor.to_numpy(m.scaled.W),
        [r.copy() for r in dist._exchanges.residuals.values()],
    )
    momentum = tensor.to_numpy(dist.opt.state_of(m.scaled.W))

    def failing(*args):
        raise RuntimeError("the collective failed")

    monkeypatch.setattr(comm, "sparse_allreduce", failing)
    tx.copy_from_numpy(grads[1])
    with pytest.raises(RuntimeError, match="the collective failed"):
        m(tx)
    np.testing.assert_array_equal(tensor.to_numpy(m.scaled.W), w)
    np.testing.assert_array_equal(tensor.to_numpy(dist.opt.state_of(m.scaled.W)), momentum)
    (after,) = dist._exchanges.residuals.values()
    np.testing.assert_array_equal(after, residual)
    with pytest.raises(DistributedError, match="a step failed on rank 0"):
        m(tx)


def test_a_failure_before_any_exchange_leaves_the_communicator_usable(
    fresh_communicator, monkeypatch
):
    comm = fresh_communicator
    m = Exchanging(np.zeros(4, np.float32), "backward_and_update")
    m.set_optimizer(opt.DistOpt(opt.SGD(lr=1.0), communicator=comm))
    tx = tensor.PlaceHolder((4,), device.create_cpu_device("16MiB"))
    m.compile([tx], is_train=True, use_graph=False)
    tx.copy_from_numpy(np.ones(4, np.float32))
    with monkeypatch.context() as patch:
        patch.setattr(m, "forward", lambda x: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            m(tx)
    m(tx)  # the ranks still agree: nothing was exchanged
    np.testing.assert_array_equal(tensor.to_numpy(m.scaled.W), -np.ones(4, np.float32))


def test_a_failed_step_drops_the_optimizer_state_it_made(fresh_communicator, monkeypatch):
    """As with a bare optimizer: momentum made by a step that fails goes back to the pool."""
    dist = opt.DistOpt(opt.SGD(lr=1.0, momentum=0.9), communicator=fresh_communicator)
    m = Exchanging(np.zeros(4, np.float32), "backward_and_update")
    m.set_optimizer(dist)
    tx = tensor.PlaceHolder((4,), device.create_cpu_device("16MiB"))
    m.compile([tx], is_train=True, use_graph=False)
    tx.copy_from_numpy(np.ones(4, np.float32))
    real = dist.opt._allocate_state

    def allocate_then_fail(params, dev):
        real(params, dev)
        assert dist.opt.moments  # made...
        raise MemoryError("the pool is full (a test)")

    monkeypatch.setattr(dist.opt, "_allocate_state", allocate_then_fail)
    with pytest.raises(MemoryError):
        m(tx)
    assert not dist.opt.moments  # ...and dropped again


def test_sparse_residuals_belong_to_what_was_exchanged(communicator):
    """Two models sharing one DistOpt (a GAN's two halves): each keeps its own residual."""
    dist = opt.DistOpt(opt.SGD(lr=1.0), communicator=communicator)
    dev = device.create_cpu_device("16MiB")
    models = []
    for _ in range(2):
        m = Exchanging(np.zeros(8, np.float32), "backward_and_sparse_update", spars=0.25, topK=True)
        m.set_optimizer(dist)
        tx = tensor.PlaceHolder((8,), dev)
        m.compile([tx], is_train=True, use_graph=False)
        models.append((m, tx))
    a, b = models
    a[1].copy_from_numpy(np.arange(1, 9, dtype=np.float32))
    a[0](a[1])
    b[1].copy_from_numpy(np.zeros(8, np.float32))
    b[0](b[1])
    np.testing.assert_array_equal(tensor.to_numpy(b[0].scaled.W), np.zeros(8, np.float32))
    assert len(dist._exchanges.residuals) == 2


def test_sparsification_always_sends_nan(communicator):
    g = np.array([np.nan, 0.1, 5.0, 0.2], np.float32)
    for top_k, spars in ((True, 0.25), (False, 1.0)):
        got, dist = exchanged(
            communicator, [g], False, "backward_and_sparse_update", spars=spars, topK=top_k
        )
        assert np.isnan(got[0]), (top_k, got)
        (residual,) = dist._exchanges.residuals.values()
        assert np.isfinite(residual).all(), residual


def test_shard_gives_each_rank_an_equal_contiguous_part():
    assert shard((np.arange(10),), 1, 3)[0].tolist() == [3, 4, 5]
    with pytest.raises(ValueError, match="rank must be in 0..2"):
        shard((np.arange(10),), 3, 3)
    with pytest.raises(ValueError, match="different lengths"):
        shard((np.arange(10), np.arange(9)), 0, 2)


def test_a_broken_communicator_refuses_further_calls(fresh_communicator):
    comm = fresh_communicator
    with pytest.raises(DistributedError, match="did not complete"):
        comm.fail("did not complete (a test)")
    with pytest.raises(DistributedError, match="failed earlier"):
        comm.submit("anything", lambda: None)


def test_all_reduce_and_wait_as_singas_scripts_call_them(communicator):
    """train_cnn.py sums a number over the ranks: copy it in, all_reduce(t.data), wait()."""
    dist = opt.DistOpt(opt.SGD(), communicator=communicator)
    reducer = tensor.Tensor((1,), device.create_cpu_device("1MiB"))
    reducer.copy_from_numpy(np.array([2.5], np.float32))
    dist.all_reduce(reducer.data)
    dist.wait()
    assert tensor.to_numpy(reducer)[0] == 2.5  # one rank: its own value, not divided


def test_bad_arguments_are_refused_with_the_fix(communicator):
    with pytest.raises(TypeError, match=r"opt.DistOpt\(opt.SGD"):
        opt.DistOpt("sgd", communicator=communicator)
    with pytest.raises(ValueError, match="launch with mpiexec"):
        opt.DistOpt(opt.SGD(), nccl_id=1, communicator=communicator)
    with pytest.raises(ValueError, match="choose one of"):
        opt.DistOpt(opt.SGD(), dist_option="gzip", communicator=communicator)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        opt.DistOpt(opt.SGD(), dist_option="sparseTopK", spars=5, communicator=communicator)
    with pytest.raises(ValueError, match="positive number of seconds"):
        Communicator(timeout=float("nan"))


def test_without_mpi4py_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(ImportError, match=r"pip install 'nnmem\[mpi\]'"):
        Communicator()


def test_importing_nnmem_loads_no_mpi():
    code = "import sys, nnmem, nnmem.opt; assert 'mpi4py' not in sys.modules, 'mpi4py loaded'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_ctrl_c_during_the_exchanges_breaks_the_communicator(fresh_communicator, monkeypatch):
    """Every rank gets the Ctrl-C, each at its own point: their collectives cannot match
    any more, so the communicator refuses to go on (and aborts the job at exit)."""
    comm = fresh_communicator
    dist = opt.DistOpt(opt.SGD(lr=1.0), communicator=comm)
    m = Exchanging(np.zeros(4, np.float32), "backward_and_update")
    m.set_optimizer(dist)
    tx = tensor.PlaceHolder((4,), device.create_cpu_device("16MiB"))
    m.compile([tx], is_train=True, use_graph=False)
    tx.copy_from_numpy(np.ones(4, np.float32))

    def interrupted(values):
        raise KeyboardInterrupt

    monkeypatch.setattr(comm, "allreduce", interrupted)
    with pytest.raises(KeyboardInterrupt):
        m(tx)
    np.testing.assert_array_equal(tensor.to_numpy(m.scaled.W), np.zeros(4, np.float32))
    with pytest.raises(DistributedError, match="KeyboardInterrupt"):
        m(tx)
