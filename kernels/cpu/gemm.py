"""Matrix multiplication: the one kernel that is plain Python, not Numba.

Numba can only compile ``np.dot`` / ``@`` by linking SciPy's BLAS, and SciPy is
not a dependency of nnmem. NumPy's own ``np.matmul`` already calls the BLAS it
was built with (OpenBLAS in the wheels), which is multi-threaded and far faster
than any loop nest we could write, so the kernel layer calls it from Python.

Memory contract: ``matmul`` writes into ``out`` and allocates nothing, provided
``out`` does not overlap ``a`` or ``b`` (NumPy would silently make a temporary
copy to resolve the overlap). ``a`` and ``b`` may be transposed or sliced views,
which BLAS consumes directly through its transpose flags and leading dimensions.

Determinism: for fixed shapes, strides and thread count, OpenBLAS computes each
output element with the same summation order on every call, so repeated calls
give bit-identical results. Different shapes (e.g. a different chunking of a
batch) may round differently in the last bits.
"""

import numpy as np

__all__ = ["matmul"]


def matmul(out, a, b, trans_a=False, trans_b=False):
    """out (M,N) = op(a) @ op(b), op(a) (M,K), op(b) (K,N), where op transposes when its flag is
    set (a and b are passed as stored: the linear layer's backward multiplies by W^T this way,
    and the CUDA twin reads the transpose through its indexing instead of a strided view).
    Writes out (C-contiguous, same dtype); no workspace."""
    if out.dtype != a.dtype or out.dtype != b.dtype:
        raise TypeError(f"matmul: dtypes must match, got out={out.dtype}, a={a.dtype}, b={b.dtype}")
    np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=out)
