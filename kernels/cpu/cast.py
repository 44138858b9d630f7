"""Conversion between dtypes: y = x, element by element, in y's dtype (SINGA's AsType).

One kernel for every pair of the tensors' dtypes (float32, float64, int32): Numba compiles
the loop once per pair of array types. A float becomes an int by truncation toward zero (C's
conversion, which SINGA's AsType uses); a NaN, an infinity or a value beyond the int's range
gives an unspecified int, as in C. An int or a float becomes a float rounded to nearest.

Flat 1-D arrays (``a.reshape(-1)``) of one size; bit-identical on every call, no allocation;
compiled serial for the reason kernels/cpu/elementwise.py gives (a cast is memory-bound and
rare: labels to floats, a mask to its input's dtype).
"""

from ._jit import njit


def _cast(y, x):
    """y[i] = x[i] converted to y's dtype. Writes y."""
    if y.size != x.size:
        raise ValueError("cast: arrays must have the same number of elements")
    for i in range(x.size):
        y[i] = x[i]


cast = njit(cache=True)(_cast)
