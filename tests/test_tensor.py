"""Tensors: lazy allocation, reference counting, host writes and their errors."""

import numpy as np
import pytest

from nnmem import device, tensor
from nnmem.memory import UnwrittenBlockError


@pytest.fixture
def dev():
    return device.create_cpu_device("16MiB")


def allocated(dev):
    return dev.memory_stats()["allocated_bytes.current"]


def test_allocation_is_lazy_and_freed_with_the_last_reference(dev):
    t = tensor.Tensor((64, 64), dev, tensor.float32)
    assert allocated(dev) == 0, "creating a tensor must not allocate"
    t.set_value(1.0)
    assert allocated(dev) == 64 * 64 * 4
    view = t.reshape((4096,))  # shares the block
    del t
    assert allocated(dev) == 64 * 64 * 4, "a view keeps the block alive"
    assert tensor.to_numpy(view).sum() == 4096
    del view
    assert allocated(dev) == 0
    assert dev.memory_stats()["num_frees"] == 1


def test_a_block_keeps_its_view_while_its_bytes_stay_where_they_are(dev):
    """Block.array gives the same view again for the same offset, shape and dtype, a new one
    for another shape or dtype, and one of the new bytes once the block was released and
    written again elsewhere; a block in a graph's arena is checked every time."""
    t = tensor.Tensor((4, 4), dev, tensor.float32)
    t.set_value(1.0)
    block = t.block
    first = block.array((4, 4), np.float32)
    assert block.array((4, 4), np.float32) is first
    assert block.array((16,), np.float32).shape == (16,)
    assert block.array((4, 4), np.int32).dtype == np.int32
    assert block.array((4, 4), np.float32) is not first  # (only the last view is kept)
    holder = tensor.Tensor((8, 8), dev)  # takes the first bytes once the block lets them go
    old_offset = block.offset
    block.release()
    holder.set_value(2.0)
    block.ensure_allocated()  # new bytes, elsewhere
    assert block.offset != old_offset
    again = block.array((4, 4), np.float32)
    assert again is not first
    again[...] = 3.0
    assert (first == 2.0).all()  # the old bytes are the holder's
    arena = dev.pool.alloc(1024)  # a stand-in arena holding the block at its start
    block.offset, block.arena_offset = arena, arena
    block.array((4, 4), np.float32)
    dev.pool.free(arena)  # the arena goes: the block's next view must not be handed out
    with pytest.raises(ValueError):
        block.array((4, 4), np.float32)
    block.offset = block.arena_offset = None


def test_reading_an_unwritten_tensor_raises(dev):
    t = tensor.Tensor((3,), dev)
    with pytest.raises(UnwrittenBlockError, match="before anything wrote it"):
        tensor.to_numpy(t)


def test_copy_from_numpy_round_trip_and_to_numpy_is_a_copy(dev):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tensor.Tensor((3, 4), dev).copy_from_numpy(a)
    out = tensor.to_numpy(t)
    out[0, 0] = 99
    np.testing.assert_array_equal(tensor.to_numpy(t), a)


def test_copy_from_numpy_rejects_a_wrong_size_and_keeps_the_data(dev):
    t = tensor.from_numpy(np.ones((2, 3), np.float32), dev)
    with pytest.raises(ValueError, match=r"shape \(3, 3\) \(9 elements\).*as many elements"):
        t.copy_from_numpy(np.zeros((3, 3), np.float32))
    np.testing.assert_array_equal(tensor.to_numpy(t), np.ones((2, 3)))


def test_copy_from_numpy_takes_the_same_size_in_another_shape_as_singa(dev):
    t = tensor.Tensor((2, 1, 3), dev)
    t.copy_from_numpy(np.arange(6, dtype=np.float32).reshape(3, 2))
    np.testing.assert_array_equal(tensor.to_numpy(t), np.arange(6).reshape(2, 1, 3))


def test_copy_from_numpy_takes_whole_float_labels_into_int_tensors(dev):
    labels = tensor.Tensor((2, 3), dev, tensor.int32)
    labels.copy_from_numpy(np.eye(3, dtype=np.float32)[[0, 2]])  # one-hot rows (SINGA's MNIST)
    np.testing.assert_array_equal(tensor.to_numpy(labels), [[1, 0, 0], [0, 0, 1]])
    with pytest.raises(TypeError, match="lose information"):
        labels.copy_from_numpy(np.full((2, 3), 0.5, np.float32))
    with pytest.raises(TypeError, match="lose information"):
        labels.copy_from_numpy(np.full((2, 3), 1e12))
    np.testing.assert_array_equal(tensor.to_numpy(labels), [[1, 0, 0], [0, 0, 1]])


def test_copy_from_numpy_dtype_rules(dev):
    t = tensor.Tensor((4,), dev, tensor.float32)
    with pytest.raises(TypeError, match=r"float64.*astype\(np.float32\)"):
        t.copy_from_numpy(np.zeros(4))
    t.copy_from_numpy(np.arange(4, dtype=np.uint8))  # lossless: accepted
    labels = tensor.Tensor((3,), dev, tensor.int32)
    labels.copy_from_numpy(np.array([0, 5, 9]))  # int64 labels that fit int32
    with pytest.raises(TypeError, match="lose information"):
        labels.copy_from_numpy(np.array([0, 2**40, 1]))
    with pytest.raises(TypeError, match="float32, float64 or int32"):
        tensor.Tensor((2,), dev, np.int8)


def test_random_fills_follow_the_device_seed(dev):
    dev.SetRandSeed(7)
    a = tensor.to_numpy(tensor.Tensor((1000,), dev).gaussian(1.0, 2.0))
    b = tensor.to_numpy(tensor.Tensor((1000,), dev).uniform(-1, 3))
    dev.SetRandSeed(7)
    np.testing.assert_array_equal(
        a, tensor.to_numpy(tensor.Tensor((1000,), dev).gaussian(1.0, 2.0))
    )
    assert abs(a.mean() - 1.0) < 0.2 and abs(a.std() - 2.0) < 0.2
    assert b.min() >= -1 and b.max() < 3


def test_placeholder_needs_no_gradient(dev):
    assert not tensor.PlaceHolder((2, 2), dev).requires_grad
    assert tensor.Tensor((2, 2), dev).requires_grad


def test_memory_stats_names_and_peak_reset(dev):
    t = tensor.zeros((1000,), dev)
    stats = dev.memory_stats()
    for key in (
        "allocated_bytes.current",
        "allocated_bytes.peak",
        "reserved_bytes",
        "largest_free_block",
        "num_allocs",
        "num_frees",
    ):
        assert key in stats
    del t
    assert dev.memory_stats()["allocated_bytes.peak"] > 0
    dev.reset_peak_memory_stats()
    assert dev.memory_stats()["allocated_bytes.peak"] == 0


def test_pool_size_strings_and_cuda_error():
    assert device.create_cpu_device("1MiB").memory_stats()["reserved_bytes"] == 2**20
    with pytest.raises(ValueError, match="512MiB"):
        device.create_cpu_device("lots")
    with pytest.raises(device.DeviceUnavailable, match="create_cpu_device"):
        device.create_cuda_gpu()


def test_error_texts_name_the_tensor_and_devices_print_apart(dev):
    t = tensor.Tensor((2, 3), dev)
    with pytest.raises(ValueError) as e:
        t.copy_from_numpy(np.zeros((3, 3), np.float32))
    assert "into tensor of shape (2, 3)" in str(e.value)
    with pytest.raises(TypeError) as e:
        tensor.PlaceHolder((2,), dev, tensor.int32).copy_from_numpy(np.full(2, 0.5))
    assert "into tensor input of dtype int32" in str(e.value)
    other = device.create_cpu_device("1MiB")
    assert repr(dev) != repr(other) and repr(other).startswith("<Device cpu:")


# -- repr: values as NumPy prints them, and never a read that could allocate or fail ---------
def numpy_text(t):
    """The values as repr shows them: NumPy's own text at 4 decimals of precision (it drops
    trailing zeros: 1.209, not 1.2090)."""
    return np.array2string(tensor.to_numpy(t), precision=4, separator=", ")


def test_repr_shows_the_values_of_a_small_written_tensor(dev):
    loss = tensor.from_numpy(np.array([np.log(10)], np.float32), dev)
    assert repr(loss) == "Tensor([2.3026], dtype=float32, device=cpu)"
    ids = tensor.from_numpy(np.arange(6).reshape(2, 3), dev)
    assert repr(ids) == "Tensor([[0, 1, 2],\n        [3, 4, 5]], dtype=int32, device=cpu)"
    named = tensor.Tensor((2,), dev, name="b").set_value(0.5)
    assert repr(named) == "Tensor([0.5, 0.5], dtype=float32, device=cpu, name='b')"


def test_repr_of_a_training_step_s_loss_in_eager_and_graph_mode():
    from training import batches, train

    from nnmem.models import create_model

    for use_graph in (False, True):
        m = create_model("mlp", hidden=(8,))
        _, _, _, tx, ty = train(m, batches((4, 1, 4, 4), 1), use_graph, pool="16MiB")
        _, loss = m(tx, ty)
        assert repr(loss) == f"Tensor({numpy_text(loss)}, dtype=float32, device=cpu)"


def test_repr_of_a_large_tensor_shows_its_shape_without_reading_it(dev, monkeypatch):
    big = tensor.Tensor((40, 40), dev).set_value(1.0)
    monkeypatch.setattr(dev, "to_host", lambda *a: pytest.fail("repr read a large tensor"))
    assert repr(big) == (
        "Tensor(shape=(40, 40), dtype=float32, device=cpu, 1600 elements, not printed: "
        "tensor.to_numpy(t) reads them)"
    )


def test_repr_of_an_unwritten_tensor_neither_allocates_nor_raises(dev):
    t = tensor.Tensor((3,), dev)
    assert repr(t) == "Tensor(shape=(3,), dtype=float32, device=cpu, unwritten)"
    assert allocated(dev) == 0 and t.block.offset is None


def test_repr_on_a_planning_device_says_it_has_no_values():
    planning = device.create_planning_device()
    t = tensor.Tensor((2,), planning).set_value(1.0)  # allocated there, never computed
    assert repr(t).endswith("device=planning, no values on a planning device)")


def test_repr_while_graph_mode_records_the_step_says_so():
    from nnmem import layer, model, opt

    seen = []

    class Printing(model.Model):
        def __init__(self):
            super().__init__()
            self.fc, self.loss = layer.Linear(3), layer.SoftMaxCrossEntropy()

        def forward(self, x):
            return self.fc(x)

        def train_one_batch(self, x, y):
            loss = self.loss(self.forward(x), y)
            seen.append(repr(loss))  # while recording: no value, and no error
            self.optimizer(loss)
            return loss

    dev = device.create_cpu_device("1MiB")
    dev.SetRandSeed(0)
    m = Printing()
    m.set_optimizer(opt.SGD(lr=0.1))
    tx = tensor.from_numpy(np.ones((2, 4), np.float32), dev)
    ty = tensor.from_numpy(np.array([0, 2]), dev)
    m.compile([tx], is_train=True, use_graph=True)
    loss = m(tx, ty)
    assert seen == [
        "Tensor(shape=(1,), dtype=float32, device=cpu, no value yet: made by the step graph "
        "mode is recording)"
    ]
    assert repr(loss) == f"Tensor({numpy_text(loss)}, dtype=float32, device=cpu)"


def test_repr_never_waits_for_another_thread_s_step_and_never_raises(dev, monkeypatch):
    import threading

    t = tensor.Tensor((2,), dev).set_value(1.0)
    held, done = threading.Event(), threading.Event()

    def step_on_another_thread():
        with dev.lock:
            held.set()
            done.wait(timeout=10)  # a repr that waited would read after this: the test fails

    worker = threading.Thread(target=step_on_another_thread)
    worker.start()
    held.wait()
    try:
        assert repr(t).endswith("values not read: another thread's step is running on the device)")
    finally:
        done.set()
        worker.join()

    def broken(*args):
        raise RuntimeError("the device is gone")

    monkeypatch.setattr(dev, "to_host", broken)
    assert repr(t).endswith("values unreadable (RuntimeError))")
    assert repr(tensor.Tensor.__new__(tensor.Tensor)).startswith("Tensor(shape=None")


def test_repr_of_a_tensor_the_tensor_cache_evicted_does_not_fetch_it_back(dev):
    from nnmem.memory.cache import TensorCache

    dev.set_memory_budget(None, TensorCache(dev, "all"))
    with dev.step():  # made during a step: a candidate for eviction
        t = tensor.from_numpy(np.arange(4, dtype=np.float32), dev)
        dev.cache.consider("test", [t.block])
        dev.cache._copy_out(dev.cache.resident.pop(id(t.block)))
        dev.cache._settle(id(t.block), keep_on_device=False)
    before = allocated(dev)
    assert repr(t).endswith("evicted to host memory by the tensor cache)")
    assert t.block.offset is None and allocated(dev) == before
