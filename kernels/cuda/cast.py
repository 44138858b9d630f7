"""Conversion between dtypes on the GPU: the twin of kernels/cpu/cast.py (read its docstring).

One thread per element, y[i] = x[i] in y's dtype: a float becomes an int by truncation toward zero
(the GPU's cvt.rzi, C's conversion), an int or a float a float rounded to nearest. A launch
signature per ordered pair of float16, float32, float64 and int32, the pair itself included (a cast
to the same dtype is a copy).
"""

import itertools

from numba import cuda

from ._launch import check_device, kernel, launch_1d

DTYPES = ("float16", "float32", "float64", "int32")


@kernel(*(f"void({to}[::1], {of}[::1])" for to, of in itertools.product(DTYPES, DTYPES)))
def _cast_kernel(y, x):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = x[i]


def cast(y, x, *, stream=0):
    """y[i] = x[i] converted to y's dtype (float16, float32, float64 or int32 each). Writes y."""
    check_device("cast", ndim=1, y=y, x=x)
    for label, a in (("y", y), ("x", x)):
        if a.dtype.name not in DTYPES:
            raise TypeError(f"cast: {label} has dtype {a.dtype}; the kernel takes {DTYPES}")
    if y.size != x.size:
        raise ValueError("cast: arrays must have the same number of elements")
    launch_1d(_cast_kernel, x.size, stream, y, x)
