"""NumPy's own OpenBLAS, reached through ctypes, so that nnmem's threads run its GEMMs.

Why not just ``np.matmul``? OpenBLAS has a thread pool of its own, and nnmem's Numba kernels
have another (Numba's threads). Two pools on the same cores take turns badly: after a
GEMM, OpenBLAS's threads spin waiting for the next one while a Numba kernel wants those cores,
and with another busy process on the machine its threads wait for each other through every
GEMM (measured on 2 cores with one busy process beside: 1,027 images/s for the CNN with
OpenBLAS threaded, 2,545 with it single-threaded). Its thread count is process-wide, and
setting it (or the environment) would change every other library's GEMMs in the process.

So nnmem calls OpenBLAS's ``cblas_?gemm`` on pieces of the product from inside a Numba
``prange`` loop (gemm.py): ONE pool of threads does all the work, the GEMMs get exactly the
threads that ``numba.set_num_threads`` gives the calling thread (per-operation thread counts),
and each call runs single-threaded inside OpenBLAS.

That last part is the one compromise. OpenBLAS's thread count is one number for the process
(its ``openblas_set_num_threads_local`` is thread-local only in OpenMP builds; NumPy's wheels
use pthreads), and a GEMM called while it is above 1 hands work to OpenBLAS's own threads.
So ``single_threaded()`` sets it to 1 while nnmem's GEMMs run and puts the program's value
back when the last one ends: nothing stays changed, but a GEMM that ANOTHER thread of the
program starts in that window runs on one thread (same result, less speed).

The functions are found in the OpenBLAS that NumPy's wheels bundle (``numpy.libs/`` on Linux,
``numpy/.dylibs`` on macOS), under the names its builds give them: ``scipy_cblas_sgemm64_`` (NumPy
2: scipy-openblas, 64-bit integers), ``cblas_sgemm64_`` (NumPy 1.x's openblas64_), ``cblas_sgemm``.
Where none is found (NumPy built against another BLAS), ``FOUND`` is None, ``MISSING`` says
why, and gemm.py calls ``np.matmul`` instead.
"""

import contextlib
import ctypes
import glob
import os
import threading

import numpy as np

__all__ = ["FOUND", "MISSING", "NO_TRANS", "TRANS", "Blas", "single_threaded"]

NO_TRANS, TRANS = 111, 112  # CBLAS_TRANSPOSE; row-major order is 101
ROW_MAJOR = 101

# (prefix, suffix, integer type): the names each build of OpenBLAS in NumPy's wheels uses
_NAMINGS = (("scipy_", "64_", ctypes.c_int64), ("", "64_", ctypes.c_int64), ("", "", ctypes.c_int))


class Blas:
    """The functions nnmem calls: ``sgemm`` and ``dgemm`` (cblas_?gemm, pointers passed as
    addresses), ``get_threads()`` and ``set_threads(n)`` (OpenBLAS's process-wide count)."""

    def __init__(self, lib, path, prefix, suffix, integer):
        self.path = path
        address, c_int = ctypes.c_size_t, ctypes.c_int
        for name, real in (("sgemm", ctypes.c_float), ("dgemm", ctypes.c_double)):
            fn = getattr(lib, f"{prefix}cblas_{name}{suffix}")
            fn.argtypes = [c_int, c_int, c_int, integer, integer, integer, real, address, integer]
            fn.argtypes += [address, integer, real, address, integer]
            fn.restype = None
            setattr(self, name, fn)
        self.get_threads = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}")
        self.get_threads.argtypes, self.get_threads.restype = [], c_int
        self.set_threads = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}")
        self.set_threads.argtypes, self.set_threads.restype = [c_int], None


def _candidates():
    """Shared libraries that may be NumPy's OpenBLAS, most likely first."""
    root = os.path.dirname(np.__file__)
    places = (os.path.join(root, os.pardir, "numpy.libs"), os.path.join(root, ".dylibs"))
    return [p for place in places for p in sorted(glob.glob(os.path.join(place, "*openblas*")))]


def _find():
    """(Blas, None), or (None, why not)."""
    paths = _candidates()
    if not paths:
        return None, "NumPy bundles no OpenBLAS here (built against another BLAS)"
    reasons = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            reasons.append(f"{os.path.basename(path)}: {e}")
            continue
        for prefix, suffix, integer in _NAMINGS:
            try:
                return Blas(lib, path, prefix, suffix, integer), None
            except AttributeError as e:
                reasons.append(f"{os.path.basename(path)} ({prefix}*{suffix}): no {e}")
    return None, "; ".join(reasons)


FOUND, MISSING = _find()


_lock = threading.Lock()
_inside = 0  # nnmem GEMMs running now, in all threads
_saved = None  # the program's thread count, put back when the last of them ends


@contextlib.contextmanager
def single_threaded():
    """OpenBLAS runs single-threaded while the block runs (see the module's docstring); the
    count the program had is put back when the last such block of any thread ends."""
    global _inside, _saved
    with _lock:
        if _inside == 0:
            _saved = FOUND.get_threads()
            if _saved != 1:
                FOUND.set_threads(1)
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _saved != 1:
                FOUND.set_threads(_saved)
