"""Mixed precision (nnmem/optim/mixed_precision.py): compile(..., precision="float16") stores
the step in float16, updates float32 master weights, and scales the loss dynamically; a step
whose gradients overflow is skipped and changes nothing."""

import numpy as np
import pytest

from nnmem import autograd, device, opt, tensor
from nnmem.models import create_model
from nnmem.optim.mixed_precision import LossScaler
from nnmem.planning import plan

CNN = ("cnn", {}, (8, 1, 28, 28))
RESNET8 = ("resnet", {"depth": 8}, (8, 3, 16, 16))


def make(case, precision, use_graph, optimizer=None, pool="256MiB"):
    name, kwargs, shape = case
    dev = device.create_cpu_device(pool)
    dev.SetRandSeed(0)
    m = create_model(name, **kwargs)
    m.set_optimizer(optimizer or opt.SGD(lr=0.05, momentum=0.9))
    tx = tensor.Tensor(shape, dev, np.float32)
    ty = tensor.Tensor((shape[0],), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=use_graph, precision=precision)
    rng = np.random.default_rng(0)
    x = rng.random(shape).astype(np.float32)
    y = rng.integers(0, 10, shape[0]).astype(np.int32)
    return m, tx, ty, x, y


def step(m, tx, ty, x, y):
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(y)
    _, loss = m(tx, ty)
    return float(tensor.to_numpy(loss)[0])


def train(case, precision, use_graph, steps=4, **kwargs):
    m, tx, ty, x, y = make(case, precision, use_graph, **kwargs)
    return [step(m, tx, ty, x, y) for _ in range(steps)], m


def states(m):
    """Every parameter, BatchNorm statistic and optimizer state, as NumPy copies."""
    found = {name: tensor.to_numpy(t) for name, t in m.get_states().items()}
    for kind, value in m.optimizer.get_states().items():
        for name, a in value.items() if isinstance(value, dict) else [("", value)]:
            found[f"optimizer {kind} {name}"] = np.array(a)
    scaler = m.optimizer.loss_scaler
    found.update({f"master {p.name}": tensor.to_numpy(t) for p, t in scaler.masters.items()})
    return found


def test_mixed_precision_trains_eagerly_and_in_graph_mode_with_the_same_numbers():
    wide, _ = train(CNN, "float32", use_graph=True)
    eager, m = train(CNN, "float16", use_graph=False)
    graph, _ = train(CNN, "float16", use_graph=True)
    assert eager == graph
    np.testing.assert_allclose(eager, wide, rtol=0.02)  # float16 rounding at every tensor
    assert eager[-1] < eager[0]
    params = m.get_params()
    assert params and all(p.dtype == np.float16 for p in params.values())
    masters = m.optimizer.loss_scaler.masters
    assert set(masters) == set(params.values())
    for param, master in masters.items():  # the forward pass reads the master, rounded
        assert master.dtype == np.float32
        np.testing.assert_array_equal(
            tensor.to_numpy(param), tensor.to_numpy(master).astype(np.float16)
        )
    # the optimizer's state is float32 and keyed by the parameters' names (checkpoints)
    moments = m.optimizer.get_states()["moments"]
    assert set(moments) == set(params) and all(a.dtype == np.float32 for a in moments.values())


def test_master_weights_keep_the_updates_float16_rounds_away():
    """lr * g mostly below half a float16 ulp of w: stored in float16 alone, most weights never
    move (measured: 7% move); their float32 masters take the updates (87% move: the others'
    gradients are 0)."""
    sgd = {"optimizer": None}
    changed = {}
    for precision in ("float32", "float16"):
        sgd["optimizer"] = opt.SGD(lr=1e-4)
        m, tx, ty, x, y = make(CNN, precision, use_graph=True, **sgd)
        if precision == "float32":  # float16 storage alone: the step in float16 end to end
            m, tx, ty, x, y = _all_float16(m, x, y)
        w = m.get_params()["conv2.W"]
        before = tensor.to_numpy(w).astype(np.float32)
        for _ in range(3):
            step(m, tx, ty, x, y)
        held = m.optimizer.loss_scaler.masters.get(w, w) if m.optimizer.loss_scaler else w
        changed[precision] = np.mean(tensor.to_numpy(held).astype(np.float32) != before)
    assert changed["float32"] < 0.2  # float16 storage alone: most updates lost
    assert changed["float16"] > 0.8  # mixed precision: the masters keep them


def _all_float16(_, x, y):
    """A CNN trained in float16 storage with no masters (float16 inputs, as before precision=)."""
    dev = device.create_cpu_device("256MiB")
    dev.SetRandSeed(0)
    m = create_model("cnn")
    m.set_optimizer(opt.SGD(lr=1e-4))
    tx = tensor.Tensor(x.shape, dev, np.float16)
    ty = tensor.Tensor(y.shape, dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True)
    return m, tx, ty, x.astype(np.float16), y


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
def test_an_overflowing_step_is_skipped_and_changes_nothing(use_graph):
    m, tx, ty, x, y = make(RESNET8, "float16", use_graph)
    step(m, tx, ty, x, y)
    scaler = m.optimizer.loss_scaler
    scale, before = scaler.scale, states(m)
    assert any("running" in name or "bn" in name for name in before)  # BatchNorm's statistics
    bad = x.copy()
    bad[0, 0, 0, 0] = np.inf  # every gradient that the first sample reaches overflows
    step(m, tx, ty, bad, y)
    assert scaler.last_step_skipped and scaler.skipped_steps == 1
    assert scaler.scale == scale / 2
    after = states(m)
    assert after.keys() == before.keys()
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    loss = step(m, tx, ty, x, y)  # the next clean step trains
    assert np.isfinite(loss) and not scaler.last_step_skipped
    assert any(not np.array_equal(states(m)[n], before[n]) for n in before if "W" in n)


def test_the_scale_grows_after_clean_steps_up_to_the_largest_float16_power_of_two():
    sgd = opt.SGD(lr=0.01)
    sgd.loss_scaler = LossScaler(init_scale=2.0**13, growth_interval=2)  # compile keeps it
    m, tx, ty, x, y = make(CNN, "float16", use_graph=True, optimizer=sgd)
    scales = []
    for _ in range(6):
        step(m, tx, ty, x, y)
        scales.append(sgd.loss_scaler.scale)
    assert scales == [2**13, 2**14, 2**14, 2**15, 2**15, 2**15]  # 2^16 is inf in float16
    assert sgd.loss_scaler.skipped_steps == 0


def test_mixed_precision_plans_what_it_measures_and_halves_the_activations():
    name, kwargs, _ = RESNET8
    shape = (16, 3, 32, 32)
    planned = {}
    for precision in ("float32", "float16"):
        techniques = plan(create_model(name, **kwargs), shape, precision=precision,
                          offload="none").techniques  # fmt: skip
        planned[precision] = techniques[1].peak_bytes  # liveness
    assert planned["float16"] < 0.6 * planned["float32"]
    m, tx, ty, x, y = make((name, kwargs, shape), "float16", use_graph=True)
    step(m, tx, ty, x, y)
    step(m, tx, ty, x, y)
    assert tx.device.memory_stats()["allocated_bytes.peak"] == planned["float16"]


def test_a_loaded_checkpoint_is_what_the_masters_update(tmp_path):
    m, tx, ty, x, y = make(CNN, "float16", use_graph=True)
    step(m, tx, ty, x, y)
    m.save_states(str(tmp_path / "ckpt.zip"))
    saved = {n: tensor.to_numpy(p) for n, p in m.get_params().items()}
    step(m, tx, ty, x, y)
    m.load_states(str(tmp_path / "ckpt.zip"))
    for param, master in m.optimizer.loss_scaler.masters.items():
        np.testing.assert_array_equal(tensor.to_numpy(master), saved[param.name])


def test_inference_casts_its_input_too():
    m, tx, ty, x, y = make(CNN, "float16", use_graph=False)
    m.eval()
    tx.copy_from_numpy(x)
    assert m(tx).dtype == np.float16


def test_bad_precision_and_scaler_arguments_say_what_to_give():
    m, tx, *_ = make(CNN, "float32", use_graph=False)
    with pytest.raises(ValueError, match="NumPy has no bfloat16"):
        m.compile([tx], precision="bfloat16")
    with pytest.raises(ValueError, match=r"choose one of \('float32', 'float16'\)"):
        m.compile([tx], precision="float64")
    with pytest.raises(ValueError, match="power of two"):
        LossScaler(init_scale=1000.0)
    with pytest.raises(ValueError, match="growth_interval"):
        LossScaler(growth_interval=0)
    with pytest.raises(ValueError, match="compile a new model with precision='float16'"):
        m.compile([tx], precision="float16")  # its parameters are float32 already
    m, tx, *_ = make(CNN, "float16", use_graph=False)

    class Plain:  # an optimizer of one's own: no masters, no loss scaling
        def __call__(self, loss):
            pass

    with pytest.raises(TypeError, match="Plain has none"):
        m.set_optimizer(Plain())


def test_nnmem_train_takes_a_precision(capsys):
    from nnmem.cli import main

    # batch 64: activations outweigh the float32 buffer the gradients are unscaled into
    quick = [
        "train",
        "--epochs",
        "1",
        "--max-batches",
        "3",
        "--batch-size",
        "64",
        "--pool",
        "256MiB",
    ]
    peaks = {}
    for precision in ("float32", "float16"):
        assert main([*quick, "--precision", precision]) == 0
        out = capsys.readouterr().out
        epoch = next(line for line in out.splitlines() if line.startswith("epoch 1:"))
        peaks[precision] = float(epoch.split("peak pool memory ")[1].split()[0])
    assert peaks["float16"] < peaks["float32"]


def run_with(**techniques):
    """ResNet-8 in mixed precision for 4 steps, the third overflowing: losses and states."""
    m, tx, ty, x, y = make(RESNET8, "float16", True)
    if techniques:
        m.compile([tx], is_train=True, use_graph=True, precision="float16", **techniques)
    losses = []
    for i in range(4):
        bad = x.copy()
        bad[0, 0, 0, 0] = np.nan if i == 2 else bad[0, 0, 0, 0]
        losses.append(step(m, tx, ty, bad, y))
    return losses, states(m)


@pytest.fixture(scope="module")
def plain_mixed_run():
    training = autograd.training  # compile sets it; the per-test restore runs after this
    yield run_with()
    autograd.training = training


@pytest.mark.parametrize(
    "techniques",
    [{"recompute": "cost-aware"}, {"offload": "all"}, {"recompute": "memory", "offload": "all"}],
    ids=["recompute", "offload", "both"],
)
def test_memory_techniques_leave_mixed_precision_bit_for_bit(plain_mixed_run, techniques):
    losses, after = run_with(**techniques)
    want_losses, want = plain_mixed_run
    np.testing.assert_array_equal(losses, want_losses)  # NaN where the skipped step's loss is
    assert np.isnan(losses[2]) and np.isfinite(losses[3])
    for name in want:
        np.testing.assert_array_equal(after[name], want[name], err_msg=name)
