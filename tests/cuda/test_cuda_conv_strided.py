"""The CUDA twins of the stride-2 3x3 and the 1x1 convolution kernels (kernels/cuda/conv3x3s2.py,
conv1x1.py: the direct kernels under the CPU kernels' names) against the CPU kernels, on tiny
shapes. Run with a GPU or NUMBA_ENABLE_CUDASIM=1 (in a pytest process of its own)."""

import numpy as np
import pytest
from cuda_testutil import needs_device, run_twins

from nnmem.kernels import sizes

pytestmark = [needs_device, pytest.mark.usefixtures("launches_match_the_registry")]


def _randn(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def _nan(shape):
    return np.full(shape, np.nan, np.float32)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4, 3), (1, 2, 4, 7, 2)])
def test_conv3x3s2(rng, shape):
    n, c, h, w, o = shape
    x, wt = _randn(rng, (n, c, h, w)), _randn(rng, (o, c, 3, 3))
    dy = _randn(rng, (n, o, (h + 1) // 2, (w + 1) // 2))
    ws = _nan(n * sizes.conv3x3s2_workspace_per_sample(c, o, h, w))
    run_twins("conv3x3s2_forward", [_nan(dy.shape), x, wt, ws], writes=[0])
    run_twins("conv3x3s2_backward_data", [_nan(x.shape), dy, wt, ws], writes=[0])
    run_twins("conv3x3s2_backward_filter", [_nan(wt.shape), dy, x, ws], writes=[0])


@pytest.mark.parametrize("shape,stride", [((2, 3, 5, 4, 3), (2, 2)), ((2, 3, 3, 4, 2), (1, 1))])
def test_conv1x1(rng, shape, stride):
    n, c, h, w, o = shape
    sh, sw = stride
    x, wt = _randn(rng, (n, c, h, w)), _randn(rng, (o, c, 1, 1))
    dy = _randn(rng, (n, o, (h - 1) // sh + 1, (w - 1) // sw + 1))
    ws = _nan(n * sizes.conv1x1_workspace_per_sample(c, h, w, sh, sw))
    run_twins("conv1x1_forward", [_nan(dy.shape), x, wt, ws, sh, sw], writes=[0])
    run_twins("conv1x1_backward_data", [_nan(x.shape), dy, wt, ws, sh, sw], writes=[0])
    run_twins("conv1x1_backward_filter", [_nan(wt.shape), dy, x, ws, sh, sw], writes=[0])
