"""nnmem.initializer (SINGA's): the spread each function draws follows the tensor's fans, the
deterministic ones are exact, and a wrong shape is refused with the fix."""

import math

import numpy as np
import pytest

from nnmem import device, initializer, tensor

DEV = device.create_cpu_device("16MiB")


def filled(fill, shape):
    t = tensor.Tensor(shape, DEV)
    DEV.SetRandSeed(0)
    fill(t)
    return tensor.to_numpy(t)


# (function, shape, standard deviation it must draw with): Linear (in, out), a conv kernel
# (out, in, kh, kw) whose fans count the receptive field, and a 1-D shape (fans = sqrt(size)).
CASES = [
    (initializer.he_normal, (300, 100), math.sqrt(2 / 300)),
    (initializer.he_uniform, (300, 100), math.sqrt(2 / 300)),
    (initializer.glorot_normal, (300, 100), math.sqrt(2 / 400)),
    (initializer.glorot_uniform, (300, 100), math.sqrt(2 / 400)),
    (initializer.lecun_normal, (300, 100), math.sqrt(1 / 300)),
    (initializer.lecun_uniform, (300, 100), math.sqrt(1 / 300)),
    (initializer.he_normal, (64, 16, 3, 3), math.sqrt(2 / (16 * 9))),
    (initializer.glorot_uniform, (64, 16, 3, 3), math.sqrt(2 / ((16 + 64) * 9))),
    (initializer.lecun_normal, (40000,), math.sqrt(1 / 200)),
    (initializer.msra, (300, 100), math.sqrt(2 / 300)),
    (initializer.glorot, (300, 100), math.sqrt(2 / 400)),
    (initializer.xavier, (300, 100), math.sqrt(2 / 400)),
]


@pytest.mark.parametrize("fill, shape, std", CASES, ids=lambda c: getattr(c, "__name__", None))
def test_the_spread_follows_the_fans(fill, shape, std):
    a = filled(fill, shape)
    assert abs(a.mean()) < 0.05 * std
    assert a.std() == pytest.approx(std, rel=0.03)
    if "uniform" in fill.__name__ or fill is initializer.xavier:
        limit = math.sqrt(3) * std  # U(-l, l) has standard deviation l / sqrt(3)
        assert a.max() <= limit and a.min() >= -limit and a.max() > 0.99 * limit


def test_gaussian_takes_the_fans_it_is_given():
    assert filled(lambda t: initializer.gaussian(t, 100, 300), (300, 100)).std() == pytest.approx(
        math.sqrt(4 / 400), rel=0.03
    )
    assert filled(lambda t: initializer.gaussian(t, fan_in=200), (300, 100)).std() == pytest.approx(
        math.sqrt(2 / 200), rel=0.03
    )
    with pytest.raises(ValueError, match="give fan_in or fan_out"):
        initializer.gaussian(tensor.Tensor((2, 2), DEV))


def test_eye_and_orthogonal_are_exact():
    np.testing.assert_array_equal(filled(initializer.eye, (3, 5)), np.eye(3, 5))
    for shape in ((6, 4), (4, 6)):
        q = filled(lambda t: initializer.orthogonal(t, gain=2.0), shape).astype(np.float64) / 2
        small = q.T @ q if shape[0] > shape[1] else q @ q.T
        np.testing.assert_allclose(small, np.eye(min(shape)), atol=1e-6)


def test_eye_and_orthogonal_refuse_what_is_not_a_matrix():
    for fill in (initializer.eye, initializer.orthogonal):
        with pytest.raises(ValueError, match=r"must be a matrix \(2-D\)"):
            fill(tensor.Tensor((2, 2, 2), DEV))
