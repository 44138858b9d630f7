"""Which threads run the parallel kernels: Numba's threading layer, and why nnmem wants TBB.

Every ``prange`` kernel (and every GEMM, gemm.py) runs on the threads of Numba's threading
layer, one per process, chosen at the first parallel launch: TBB when it can be loaded, else
OpenMP, else Numba's own workqueue (Numba's default order; NUMBA_THREADING_LAYER overrides it).
Measured on this 2-core machine, seed CNN batch 64 (python bench/train.py):

* OpenMP (GNU libgomp): a thread that finishes its share SPINS for a while before it sleeps.
  Alone, that is fast. Beside one busy process it is a collapse (2,400 -> 1,100 images/s):
  the spinning thread spends the time slice the scheduler gives it, then waits behind the
  other process when the next kernel needs it. OMP_WAIT_POLICY=PASSIVE fixes it, but it is
  read once, by the first OpenMP runtime loaded into the process, which PyTorch shares: setting
  it slows every OpenMP library of the program (PyTorch's ResNet-20 by 1.5x alone). nnmem sets
  no environment variable.
* TBB: idle threads sleep soon, and a woken one runs at once; as fast as OpenMP alone, and
  2,500 images/s beside the busy process. It is thread-safe: kernels launched from several
  threads at once (co-running operations, nnmem.concurrency) each get their own threads, and
  ``numba.set_num_threads`` sets the count of the calling thread only.
* workqueue: sleeps too, but it refuses launches from two threads at once.

What TBB does not fix: beside a busy process on a small machine, a parallel region runs at
about ONE core's speed. The thread woken on the core the busy process holds starts after that
process's time slice (1.4 ms on the Linux here): a short region is over by then, and a region
cut one piece per thread waits for it. Measured on 2 cores with TBB (bench/busy_regions.py):
0.96-1.02 effective cores for regions of 0.3-10 ms cut one piece per thread; two threads that
never wait for each other get about the fair share (1.33): 1.37. So nnmem keeps about its
one-core speed there (bench/README.md, "A busy machine").

Numba prefers TBB, but finds it only on the loader's search path, where pip's ``tbb`` wheel
does not put it (it installs ``libtbb.so.12`` in the environment's ``lib/``). ``load_tbb()``
loads that file by its path before the first launch, so Numba's own default then finds TBB.
That choice is for the whole process (Numba has one layer per process): other Numba code of
the program then runs on TBB too, as it would if TBB were on the search path.
"""

import ctypes
import importlib.metadata
import os
import re

import numba
import numpy as np
from numba import prange

from ._jit import njit

__all__ = ["THREAD_SAFE_LAYERS", "load_tbb", "tbb_library", "threading_layer"]

THREAD_SAFE_LAYERS = ("tbb", "omp")  # launches from several threads at once are allowed
_LIBRARY = re.compile(r"(^|/)(lib)?tbb(\.so\.12|\.12\.dylib|12\.dll)$")


def tbb_library():
    """The path of the TBB runtime the ``tbb`` wheel installed, or None."""
    try:
        files = importlib.metadata.files("tbb") or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if _LIBRARY.search(str(f).replace(os.sep, "/")):
            path = f.locate()
            if os.path.exists(path):
                return os.path.realpath(path)
    return None


def load_tbb():
    """Load the ``tbb`` wheel's runtime, so that Numba's default threading layer is TBB; True
    when it is loaded. Nothing is loaded when the user chose a layer (NUMBA_THREADING_LAYER)."""
    if os.environ.get("NUMBA_THREADING_LAYER", "default") != "default":
        return False
    path = tbb_library()
    if path is None:
        return False
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    return True


def threading_layer():
    """The threading layer of this process ("tbb", "omp" or "workqueue"), starting it if no
    parallel kernel has run yet."""
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel launch yet: the layer is chosen at the first one
        first_launch(np.zeros(1))
        return numba.threading_layer()


def _first_launch(x):
    """x[:] = 0, in parallel: a launch that makes Numba choose its threading layer."""
    for i in prange(x.size):
        x[i] = 0


first_launch = njit(parallel=True, cache=True)(_first_launch)
