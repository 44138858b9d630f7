"""SINGA's device module and singa_wrap as SINGA's scripts use them, and SINGA's extra training
arguments (model(tx, ty, dist_option, spars)) through Model and planning."""

import importlib.util
import subprocess
import sys
import types

import numpy as np
import pytest

import nnmem.devices
from nnmem import device, layer, model, opt, planning, singa_wrap, tensor


# -- the default device -------------------------------------------------------------------------
def test_create_cpu_device_without_arguments_is_the_default_device():
    """As in SINGA (Platform::GetDefaultDevice): a tensor made without a device and one made on
    create_cpu_device() can meet in one operation (SINGA's GAN example mixes them)."""
    dev = device.create_cpu_device()
    assert dev is device.get_default_device() is device.create_cpu_device()
    made_before = tensor.Tensor((2,))
    made_after = tensor.Tensor((2,), dev)
    assert made_before.device is made_after.device


@pytest.mark.parametrize(
    "kwargs", [{"pool_bytes": "4MiB"}, {"policy": "first_fit"}, {"link_gbps": 8}]
)
def test_create_cpu_device_with_an_argument_is_a_new_device(kwargs):
    dev = device.create_cpu_device(**kwargs)
    assert dev is not device.get_default_device()
    assert dev is not device.create_cpu_device(**kwargs)


# -- GPUs ----------------------------------------------------------------------------------------
def fake_cuda(gpus):
    """A stand-in for numba.cuda reporting `gpus` GPUs (none available when 0)."""
    return types.SimpleNamespace(is_available=lambda: gpus > 0, gpus=[object()] * gpus)


@pytest.fixture
def no_gpu(monkeypatch):
    """numba.cuda as on a machine without a GPU, and no fallback set."""
    monkeypatch.setattr(device, "_numba_cuda", lambda: fake_cuda(0))
    monkeypatch.delenv(device.CUDA_FALLBACK_VARIABLE, raising=False)


@pytest.mark.parametrize("cuda, count", [(None, 0), (fake_cuda(0), 0), (fake_cuda(2), 2)])
def test_get_num_gpus_counts_what_numba_cuda_can_use(monkeypatch, cuda, count):
    monkeypatch.setattr(device, "_numba_cuda", lambda: cuda)
    assert device.get_num_gpus() == count


@pytest.mark.parametrize("create", [device.create_cuda_gpu, lambda: device.create_cuda_gpu_on(0)])
def test_without_a_gpu_a_cuda_device_is_unavailable_by_default(no_gpu, create):
    with pytest.raises(device.DeviceUnavailable, match="create_cpu_device.*NNMEM_CUDA_FALLBACK"):
        create()


def test_without_numba_cuda_the_error_says_how_to_install_it(monkeypatch, no_gpu):
    monkeypatch.setattr(device, "_numba_cuda", lambda: None)
    with pytest.raises(device.DeviceUnavailable, match=r"nnmem\[cuda\]"):
        device.create_cuda_gpu_on(0)


@pytest.mark.parametrize(
    "create, call",
    [
        (device.create_cuda_gpu, "create_cuda_gpu()"),
        (lambda: device.create_cuda_gpu_on(1), "create_cuda_gpu_on(1)"),
    ],
)
def test_the_cpu_fallback_returns_the_default_device_and_says_so_in_one_line(
    monkeypatch, no_gpu, capsys, create, call
):
    monkeypatch.setenv("NNMEM_CUDA_FALLBACK", "cpu")
    assert create() is device.get_default_device()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert call in captured.err and "NNMEM_CUDA_FALLBACK=cpu" in captured.err


@pytest.mark.parametrize("value", ["CPU", "gpu", "1", " cpu"])
@pytest.mark.parametrize("gpus", [0, 1])
def test_a_bad_fallback_value_is_a_one_line_error_naming_the_allowed_ones(monkeypatch, value, gpus):
    monkeypatch.setattr(device, "_numba_cuda", lambda: fake_cuda(gpus))
    monkeypatch.setenv("NNMEM_CUDA_FALLBACK", value)
    with pytest.raises(ValueError, match="NNMEM_CUDA_FALLBACK=.*'cpu'") as error:
        device.create_cuda_gpu_on(0)
    assert "\n" not in str(error.value)


def test_a_gpu_without_nnmems_cuda_device_counts_as_no_gpu(monkeypatch):
    """numba's own numba.cuda finds the GPU, but numba-cuda (the `cuda` extra) is missing."""
    monkeypatch.setattr(device, "_numba_cuda", lambda: fake_cuda(1))
    monkeypatch.delattr(nnmem.devices, "cuda", raising=False)
    monkeypatch.setitem(sys.modules, "nnmem.devices.cuda", None)  # importing it fails
    monkeypatch.delenv(device.CUDA_FALLBACK_VARIABLE, raising=False)
    with pytest.raises(device.DeviceUnavailable, match=r"CUDA device cannot be imported.*\[cuda\]"):
        device.create_cuda_gpu()
    monkeypatch.setenv("NNMEM_CUDA_FALLBACK", "cpu")
    assert device.create_cuda_gpu() is device.get_default_device()


def test_a_gpu_number_that_is_not_an_integer_is_refused(no_gpu, monkeypatch):
    monkeypatch.setenv("NNMEM_CUDA_FALLBACK", "cpu")
    with pytest.raises(TypeError):
        device.create_cuda_gpu_on(0.5)


def test_a_gpu_this_machine_lacks_is_an_error_even_with_the_fallback(monkeypatch):
    monkeypatch.setattr(device, "_numba_cuda", lambda: fake_cuda(1))
    monkeypatch.setenv("NNMEM_CUDA_FALLBACK", "cpu")
    with pytest.raises(device.DeviceUnavailable, match="has 1 GPU"):
        device.create_cuda_gpu_on(3)


def test_lazy_allocation_is_always_on():
    device.enable_lazy_alloc(True)
    with pytest.raises(ValueError, match="first write"):
        device.enable_lazy_alloc(False)
    with pytest.raises(TypeError):
        device.enable_lazy_alloc(1)


# -- singa_wrap ----------------------------------------------------------------------------------
@pytest.mark.parametrize("gpus", [0, 2])
def test_use_cuda_says_whether_a_cuda_device_can_be_made(monkeypatch, gpus):
    monkeypatch.setattr(device, "_numba_cuda", lambda: fake_cuda(gpus))
    monkeypatch.delitem(vars(singa_wrap), "USE_CUDA", raising=False)
    assert singa_wrap.USE_CUDA is (gpus > 0)
    monkeypatch.delitem(vars(singa_wrap), "USE_CUDA")  # the next test computes it again


def test_singa_wrap_holds_the_switches_singa_scripts_read():
    assert singa_wrap.USE_OPENCL is singa_wrap.USE_DNNL is False
    assert singa_wrap.USE_DIST is (importlib.util.find_spec("mpi4py") is not None)
    assert singa_wrap.USE_CUDNN is False and singa_wrap.USE_PYTHON is True
    assert set(singa_wrap.__all__) <= set(dir(singa_wrap))
    with pytest.raises(AttributeError, match="Platform"):
        singa_wrap.Platform  # noqa: B018 - the read is the test


def test_importing_singa_wrap_does_not_import_numba_cuda():
    """Half a second, and useless without a GPU: only reading USE_CUDA imports it."""
    code = (
        "import sys; from nnmem import singa_wrap as singa; "
        "print('numba.cuda' in sys.modules); singa.USE_CUDA; print('numba.cuda' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


# -- SINGA's extra training arguments ------------------------------------------------------------
class SingaStyle(model.Model):
    """A model as SINGA's examples write them: train_one_batch(x, y, dist_option, spars), where
    only dist_option='plain' updates the parameters (SINGA's mlp/model.py passes 'fp32')."""

    def __init__(self):
        super().__init__()
        self.fc = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc(x)

    def train_one_batch(self, x, y, dist_option, spars):
        out = self.forward(x)
        loss = self.loss(out, y)
        if dist_option == "plain":
            self.optimizer(loss)
        elif spars is not None:
            raise AssertionError("spars reaches train_one_batch")
        return out, loss


def singa_style(use_graph, cls=SingaStyle, compile=True):
    dev = device.create_cpu_device("16MiB")
    dev.SetRandSeed(0)
    m = cls()
    m.set_optimizer(opt.SGD(lr=0.5))
    rng = np.random.default_rng(0)
    tx = tensor.from_numpy(rng.standard_normal((4, 5)).astype(np.float32), dev)
    ty = tensor.from_numpy(rng.integers(0, 3, 4).astype(np.int32), dev)
    if compile:
        m.compile([tx], is_train=True, use_graph=use_graph)
    return m, tx, ty


def weights(m):
    return tensor.to_numpy(m.fc.W).copy()


@pytest.mark.parametrize("use_graph", [False, True])
def test_extra_arguments_reach_train_one_batch_in_both_modes(use_graph):
    m, tx, ty = singa_style(use_graph)
    before = weights(m)
    m(tx, ty, "fp32", None)
    assert np.array_equal(weights(m), before)  # 'fp32': no update, as in SINGA
    m(tx, ty, "plain", None)
    updated = weights(m)
    assert not np.array_equal(updated, before)
    m(tx, ty, dist_option="plain", spars=None)  # by keyword, as mlp/model.py passes spars
    assert not np.array_equal(weights(m), updated)
    with pytest.raises(AssertionError, match="spars reaches"):
        m(tx, ty, "sparseTopK", 0.05)


def test_graph_mode_records_one_graph_per_value_of_the_extra_arguments():
    m, tx, ty = singa_style(use_graph=True)
    losses = [float(tensor.to_numpy(m(tx, ty, "plain", None)[1])[0]) for _ in range(3)]
    assert losses[2] < losses[1] < losses[0]  # replays of the recorded update
    m(tx, ty, "fp32", None)
    frozen = weights(m)
    m(tx, ty, "fp32", None)
    assert np.array_equal(weights(m), frozen)  # its own graph: no update recorded
    assert len(m._graphs) == 2
    assert m.compiled_step(tx, ty, "plain", None) is not m.compiled_step(tx, ty, "fp32", None)


def test_graph_mode_refuses_an_argument_it_could_not_tell_apart():
    m, tx, ty = singa_style(use_graph=True)
    with pytest.raises(TypeError, match=r"argument 2 is a ndarray.*hash"):
        m(tx, ty, np.zeros(3), None)
    with pytest.raises(TypeError, match=r"argument spars= is a dict"):
        m(tx, ty, "plain", spars={})


class Sequence(model.Model):
    """Takes a list of tensors, one per time step, and the target by keyword (SINGA's RNNs)."""

    def __init__(self):
        super().__init__()
        self.fc = layer.Linear(2)
        self.loss = layer.MeanSquareError()

    def forward(self, xs):
        out = self.fc(xs[0])
        for x in xs[1:]:
            out = out + self.fc(x)
        return out

    def train_one_batch(self, xs, target=None):
        out = self.forward(xs)
        loss = self.loss(out, target)
        self.optimizer(loss)
        return out, loss


def train_sequence(use_graph):
    """Losses of four steps, each on new tensors in a new list, and the graphs recorded."""
    dev = device.create_cpu_device("16MiB")
    dev.SetRandSeed(0)
    m = Sequence()
    m.set_optimizer(opt.SGD(lr=0.1))
    rng = np.random.default_rng(1)

    def new_tensor(*shape):
        return tensor.from_numpy(rng.standard_normal(shape).astype(np.float32), dev)

    m.compile([new_tensor(4, 3)], is_train=True, use_graph=use_graph)
    losses = []
    for _ in range(4):
        xs, t = [new_tensor(4, 3), new_tensor(4, 3)], new_tensor(4, 2)
        losses.append(float(tensor.to_numpy(m(xs, target=t)[1])[0]))
    return losses, len(m._graphs)


def test_tensors_in_lists_and_keywords_are_inputs_of_every_replay():
    eager, _ = train_sequence(use_graph=False)
    replayed, graphs = train_sequence(use_graph=True)
    assert graphs == 1  # one graph for lists of the same shapes, whatever the list object
    np.testing.assert_allclose(replayed, eager, rtol=1e-5)  # each replay read its own data
    assert len(set(eager)) == 4


class StatesMadeInTheStep(SingaStyle):
    """Like SINGA's char_rnn.py: get_states() adds a tensor that only the first step makes."""

    def train_one_batch(self, x, y, dist_option, spars):
        if not hasattr(self, "hidden"):
            self.hidden = tensor.Tensor((1,), x.device)
            self.hidden.set_value(0.0)
        return super().train_one_batch(x, y, dist_option, spars)

    def get_states(self):
        states = super().get_states()
        states["hidden"] = self.hidden
        return states


def test_a_step_does_not_read_states_that_the_step_makes():
    """char_rnn.py is not compiled: its first step makes the state its get_states() reads."""
    m, tx, ty = singa_style(use_graph=False, cls=StatesMadeInTheStep, compile=False)
    m(tx, ty, "plain", None)
    assert "hidden" in m.get_states()


# -- planning SINGA's models ---------------------------------------------------------------------
def test_plan_gives_singas_models_their_default_extra_arguments():
    step = planning.plan(SingaStyle(), (8, 5), offload="none")
    assert step.model == "SingaStyle" and step.best().peak_bytes > 0
    fp32 = planning.plan(SingaStyle(), (8, 5), offload="none", step_args=("fp32", None))
    assert fp32.nodes < step.nodes  # no update recorded: SINGA's 'fp32' trains nothing
    assert planning.smallest_pool(SingaStyle(), (8, 5)) > 0


def test_plan_says_which_arguments_it_cannot_guess():
    class Needs(SingaStyle):
        def train_one_batch(self, x, y, dist_option, spars, temperature):
            return super().train_one_batch(x, y, dist_option, spars)

    with pytest.raises(TypeError, match="requires temperature.*step_args"):
        planning.plan(Needs(), (8, 5))
    assert planning.plan(Needs(), (8, 5), offload="none", step_args=("plain", None, 1.0))
