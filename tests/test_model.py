"""Model: compile as a dry run, train/eval, checkpoints in SINGA's format, bad input."""

import json
import zipfile

import numpy as np
import pytest

from nnmem import device, layer, model, opt, tensor
from nnmem.model import CheckpointError


class MLP(model.Model):
    def __init__(self):
        super().__init__()
        self.fc1 = layer.Linear(16)
        self.relu = layer.ReLU()
        self.fc2 = layer.Linear(3)
        self.loss = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.optimizer(loss)
        return out, loss


def setup(seed=0, optimizer=True):
    dev = device.create_cpu_device("16MiB")
    dev.SetRandSeed(seed)
    m = MLP()
    if optimizer:
        m.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
    tx = tensor.PlaceHolder((8, 5), dev)
    ty = tensor.PlaceHolder((8,), dev, tensor.int32)
    m.compile([tx], is_train=True, use_graph=True, sequential=False)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 5)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0)
    tx.copy_from_numpy(x)
    ty.copy_from_numpy(y)
    return dev, m, tx, ty


def params_of(m):
    return {k: tensor.to_numpy(v) for k, v in m.get_states().items()}


def test_compile_creates_parameters_without_running_kernels():
    dev = device.create_cpu_device("1MiB")
    m = MLP()
    m.compile([tensor.PlaceHolder((8, 5), dev)], is_train=True)  # never written: a dry run
    params_bytes = sum(t.memsize() for t in m.get_params().values())
    assert params_bytes == (5 * 16 + 16 + 16 * 3 + 3) * 4
    # Only the 4 parameters were allocated: no activation, no kernel ran.
    assert dev.memory_stats()["num_allocs"] == 4
    assert sorted(str(owner) for _, _, owner in dev.pool.live_blocks()) == [
        "parameter fc1.W (5, 16) float32",
        "parameter fc1.b (16,) float32",
        "parameter fc2.W (16, 3) float32",
        "parameter fc2.b (3,) float32",
    ]


def test_training_lowers_the_loss_and_eval_runs_forward():
    dev, m, tx, ty = setup()
    losses = [float(tensor.to_numpy(m(tx, ty)[1])[0]) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]
    m.eval()
    logits = m(tx)
    assert logits.shape == (8, 3) and logits.creator is None


def test_save_and_load_states_round_trip(tmp_path):
    dev, m, tx, ty = setup()
    m(tx, ty)
    path = tmp_path / "ckpt.zip"
    m.save_states(str(path), aux_states={"epoch": tensor.from_numpy(np.array([3], np.int32), dev)})
    with zipfile.ZipFile(path) as zf:
        assert sorted(zf.namelist()) == ["states_attr.json", "tensor_dict.npz"]
        attrs = json.loads(zf.read("states_attr.json"))
    assert attrs["fc1.W"] == {"state_type": 0, "shape": [5, 16], "dtype": "float32"}
    assert attrs["epoch"]["state_type"] == 1
    saved = params_of(m)
    m.save_states(str(path))  # overwriting is allowed
    m(tx, ty)
    _, other, _, _ = setup(seed=5)
    aux = other.load_states(str(path))
    assert aux == {}
    for k, v in params_of(other).items():
        np.testing.assert_array_equal(v, saved[k])


@pytest.mark.parametrize("content", [b"", b"not a zip at all", b"PK\x03\x04garbage"])
def test_corrupt_checkpoints_are_refused_and_change_nothing(tmp_path, content):
    dev, m, tx, ty = setup()
    before = params_of(m)
    path = tmp_path / "bad.zip"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="save_states"):
        m.load_states(str(path))
    for k, v in params_of(m).items():
        np.testing.assert_array_equal(v, before[k])


def test_foreign_and_mismatched_checkpoints(tmp_path):
    dev, m, tx, ty = setup()
    before = params_of(m)
    foreign = tmp_path / "foreign.zip"
    with zipfile.ZipFile(foreign, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(CheckpointError, match="without tensor_dict.npz"):
        m.load_states(str(foreign))
    pickled = tmp_path / "pickle.zip"  # an object array would need pickle: never loaded
    import io

    buf = io.BytesIO()
    np.savez(buf, **{"fc1.W": np.array([object()], dtype=object)})
    with zipfile.ZipFile(pickled, "w") as zf:
        zf.writestr("tensor_dict.npz", buf.getvalue())
        zf.writestr("states_attr.json", json.dumps({"fc1.W": {"state_type": 0}}))
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        m.load_states(str(pickled))

    class Wider(MLP):
        def __init__(self):
            super().__init__()
            self.fc1 = layer.Linear(32)

    wide = Wider()
    wide.compile([tx], is_train=True)
    path = tmp_path / "wide.zip"
    wide.save_states(str(path))
    with pytest.raises(CheckpointError, match=r"fc1.W is \(5, 32\)"):
        m.load_states(str(path))
    for k, v in params_of(m).items():
        np.testing.assert_array_equal(v, before[k])


def test_missing_optimizer_is_explained_and_changes_nothing():
    dev, m, tx, ty = setup(optimizer=False)
    before = params_of(m)
    with pytest.raises(RuntimeError, match="set_optimizer"):
        m(tx, ty)
    for k, v in params_of(m).items():
        np.testing.assert_array_equal(v, before[k])


def test_bad_labels_leave_parameters_untouched():
    dev, m, tx, ty = setup()
    before = params_of(m)
    ty.copy_from_numpy(np.array([0, 1, 2, 3, 0, 1, 2, 0], np.int32))  # 3 is out of range
    with pytest.raises(ValueError, match="label"):
        m(tx, ty)
    wrong = tensor.PlaceHolder((8, 2), tx.device, tensor.int32).set_value(0)
    with pytest.raises(ValueError, match="one-hot"):
        m(tx, wrong)
    for k, v in params_of(m).items():
        np.testing.assert_array_equal(v, before[k])


def test_load_states_before_compile_is_explained(tmp_path):
    with pytest.raises(CheckpointError, match="compile"):
        MLP().load_states(str(tmp_path / "x.zip"))
