"""SINGA's ``initializer`` module: fill a parameter tensor in place with random values whose
spread suits its fan-in and fan-out, so that activations neither vanish nor explode layer by
layer.

The fans of a weight of shape (in, out) (SINGA's Linear) are fan_in = in, fan_out = out; of a
convolution kernel (out_channels, in_channels, k...) fan_in = in_channels * prod(k),
fan_out = out_channels * prod(k); of any other shape both are sqrt(size). With n = fan_in,
fan_out or their mean (the mode), a scale s gives

- normal: N(0, s / n), standard deviation sqrt(s / n);
- uniform: U(-limit, limit), limit = sqrt(3 s / n) (the same variance, s / n).

He (s = 2, fan_in) keeps the variance of ReLU activations; Glorot/Xavier (s = 1, fan mean)
that of activations and gradients of a linear layer; LeCun (s = 1, fan_in) that of SELU's.
Each function writes the tensor's memory from the host (Tensor.gaussian/uniform), outside any
recorded step, and returns nothing, as SINGA's.
"""

import math

import numpy as np


def _fans(shape):
    """(fan_in, fan_out) of a weight shape, as above."""
    if len(shape) == 2:
        return shape[0], shape[1]
    if len(shape) in (3, 4, 5):
        receptive_field = math.prod(shape[2:])
        return shape[1] * receptive_field, shape[0] * receptive_field
    side = math.sqrt(math.prod(shape))
    return side, side


def _random_fill(t, scale, mode, distribution):
    """Fill t from N(0, scale / n) or U(+-sqrt(3 scale / n)), n the fan of `mode`."""
    fan_in, fan_out = _fans(t.shape)
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
    variance = scale / max(1.0, n)
    if distribution == "normal":
        t.gaussian(0.0, math.sqrt(variance))
    else:
        limit = math.sqrt(3.0 * variance)
        t.uniform(-limit, limit)


def he_uniform(t):
    """U(-limit, limit), limit = sqrt(6 / fan_in)."""
    _random_fill(t, 2.0, "fan_in", "uniform")


def he_normal(t):
    """N(0, 2 / fan_in)."""
    _random_fill(t, 2.0, "fan_in", "normal")


def glorot_uniform(t):
    """U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out))."""
    _random_fill(t, 1.0, "fan_avg", "uniform")


def glorot_normal(t):
    """N(0, 2 / (fan_in + fan_out))."""
    _random_fill(t, 1.0, "fan_avg", "normal")


def lecun_uniform(t):
    """U(-limit, limit), limit = sqrt(3 / fan_in)."""
    _random_fill(t, 1.0, "fan_in", "uniform")


def lecun_normal(t):
    """N(0, 1 / fan_in)."""
    _random_fill(t, 1.0, "fan_in", "normal")


def _matrix(t, name):
    if len(t.shape) != 2:
        raise ValueError(f"initializer.{name}: t must be a matrix (2-D), not of shape {t.shape}")


def eye(t):
    """Ones on the diagonal, zeros elsewhere (a 2-D tensor; SINGA's check is inverted and
    refuses exactly the 2-D tensors it means to fill: nnmem checks what the docstring says)."""
    _matrix(t, "eye")
    t.copy_from_numpy(np.eye(*t.shape, dtype=t.dtype))


def orthogonal(t, gain=1.0):
    """A random matrix with orthonormal rows or columns (whichever fit), times `gain`: the
    U or V of the SVD of a Gaussian matrix (Saxe et al., 2013)."""
    _matrix(t, "orthogonal")
    u, _, v = np.linalg.svd(np.random.normal(0.0, 1.0, t.shape), full_matrices=False)
    q = u if u.shape == t.shape else v
    t.copy_from_numpy((gain * q).astype(t.dtype))


def gaussian(t, fan_in=0, fan_out=0):
    """SINGA's older N(0, std) with std = sqrt(2 * 2 / (fan_in + fan_out)), or sqrt(2 / fan)
    when one fan is 0 (deprecated in SINGA: use he_normal or glorot_normal)."""
    if fan_in <= 0 and fan_out <= 0:
        raise ValueError("initializer.gaussian: give fan_in or fan_out (> 0)")
    both = 2 if fan_in * fan_out else 1
    t.gaussian(0.0, math.sqrt(2.0 * both / (fan_in + fan_out)))


def xavier(t):
    """U(+-sqrt(6 / (rows + columns))) (deprecated in SINGA: use glorot_uniform)."""
    limit = math.sqrt(6.0 / (t.shape[0] + t.shape[1]))
    t.uniform(-limit, limit)


def glorot(t):
    """N(0, 2 / (rows + columns)) (deprecated in SINGA: use glorot_normal)."""
    t.gaussian(0.0, math.sqrt(2.0 / (t.shape[0] + t.shape[1])))


def msra(t):
    """N(0, 2 / rows) (deprecated in SINGA: use he_normal)."""
    t.gaussian(0.0, math.sqrt(2.0 / t.shape[0]))
