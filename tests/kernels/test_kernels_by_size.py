"""Kernels compiled twice from one source (kernels/cpu/_jit.by_size): serial for small arrays,
parallel from PARALLEL_FROM elements. The two must give the same bits, in place too, on any
thread count, and the size must pick the right one."""

import numba
import numpy as np
import pytest

from nnmem.kernels.cpu import _jit, conv3x3, elementwise, optim, reduce

N = _jit.PARALLEL_FROM + 13  # just past the threshold, and not a multiple of any thread count
C = 7  # channels of the 4-D cases, N // C + 1 elements each


def _cases(rng):
    """name -> (kernel, arguments as fresh arrays/scalars): every by_size kernel."""
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    dy = rng.standard_normal(N).astype(np.float32)  # the output of the in-place cases too
    y4 = rng.standard_normal((1, C, N // C + 1, 1)).astype(np.float32)
    rows = rng.standard_normal((N // 64 + 1, 64)).astype(np.float32)
    state = [rng.random(N).astype(np.float32) for _ in range(3)]
    steps = np.array([3], np.int64)
    images = rng.standard_normal((3, C, 111, 113)).astype(np.float32)  # just past PARALLEL_FROM
    plane = (111 + 2) * (113 + 2) + 2
    return {
        "conv3x3 spread": (
            conv3x3.spread,
            (np.full((3, C, plane), np.nan, np.float32), images, False),
        ),
        "conv3x3 spread channel-major": (
            conv3x3.spread,
            (np.full((C, 3, plane), np.nan, np.float32), images, True),
        ),
        "relu_forward": (elementwise.relu_forward, (x.copy(), y)),
        "relu_forward in place": (elementwise.relu_forward, (y.copy(),) * 2),
        "relu_backward": (elementwise.relu_backward, (x.copy(), y, -y)),
        "relu_backward in place": (elementwise.relu_backward, (dy, dy, -x)),
        "sigmoid_forward": (elementwise.sigmoid_forward, (x.copy(), y)),
        "sigmoid_backward": (elementwise.sigmoid_backward, (x.copy(), y, x)),
        "add": (elementwise.add, (x.copy(), x, y)),
        "add in place": (elementwise.add, (dy, y, dy)),
        "sub": (elementwise.sub, (x.copy(), x, y)),
        "mul": (elementwise.mul, (x.copy(), x, y)),
        "axpy": (elementwise.axpy, (x.copy(), 0.5, y)),
        "scale": (elementwise.scale, (x.copy(), 1.5)),
        "fill": (elementwise.fill, (x.copy(), 2.0)),
        "copy": (elementwise.copy, (x.copy(), y)),
        "dropout_backward": (elementwise.dropout_backward, (x.copy(), y, x)),
        "add_bias_rows": (elementwise.add_bias_rows, (rows.copy(), rows[0].copy())),
        "add_bias_nchw": (elementwise.add_bias_nchw, (y4.copy(), y4[0, :, 0, 0].copy())),
        "bias_grad_nchw": (reduce.bias_grad_nchw, (np.zeros(y4.shape[1], np.float32), y4)),
        "sgd_update": (
            optim.sgd_update,
            (x.copy(), y, state[0].copy(), 0.1, 0.9, 0.0, 1e-4, True, steps),
        ),
        "adam_update": (
            optim.adam_update,
            (x.copy(), y, state[0].copy(), state[1].copy(), steps, 1e-3, 0.9, 0.999, 1e-8, 0.0),
        ),
        "rmsprop_update": (
            optim.rmsprop_update,
            (x.copy(), y, state[0].copy(), steps, 1e-3, 0.9, 1e-8, 1e-4),
        ),
        "adagrad_update": (
            optim.adagrad_update,
            (x.copy(), y, state[0].copy(), steps, 1e-2, 1e-10, 0.0),
        ),
    }


def _fresh(args):
    """A copy of every array argument (the kernels write into theirs), keeping aliasing."""
    copies = {}
    return tuple(
        copies.setdefault(id(a), a.copy()) if isinstance(a, np.ndarray) else a for a in args
    )


def _bits(args):
    return [a.view(np.uint8).copy() for a in args if isinstance(a, np.ndarray)]


@pytest.mark.parametrize("name", sorted(_cases(np.random.default_rng(0))))
def test_serial_and_parallel_give_the_same_bits(name):
    kernel, args = _cases(np.random.default_rng(1))[name]
    assert kernel.pick(*args) is kernel.parallel, "the large case must take the parallel kernel"
    serial_args = _fresh(args)
    kernel.serial(*serial_args)
    caller = numba.get_num_threads()
    try:
        for threads in sorted({1, caller}):
            numba.set_num_threads(threads)
            parallel_args = _fresh(args)
            kernel(*parallel_args)  # through the dispatch, as an operation calls it
            for got, want in zip(_bits(parallel_args), _bits(serial_args)):
                np.testing.assert_array_equal(got, want)
    finally:
        numba.set_num_threads(caller)


def test_the_size_picks_the_kernel():
    x = np.zeros(_jit.PARALLEL_FROM, np.float32)
    small = x[:-1]
    assert elementwise.relu_forward.pick(x, x) is elementwise.relu_forward.parallel
    assert elementwise.relu_forward.pick(small, small) is elementwise.relu_forward.serial
    # bias_grad_nchw looks at dy (its second argument), not at the small db
    dy = np.zeros((1, 4, _jit.PARALLEL_FROM // 4, 1), np.float32)
    db = np.zeros(4, np.float32)
    assert reduce.bias_grad_nchw.pick(db, dy) is reduce.bias_grad_nchw.parallel
    assert reduce.bias_grad_nchw.pick(db, dy[:, :, 1:]) is reduce.bias_grad_nchw.serial
    # the wrapper keeps the source's name: the concurrency profile keys operations by it
    assert elementwise.relu_forward.__qualname__ == "_relu_forward"
