"""The kernel layer: pure Numba functions over arrays (no nnmem imports).
Installed as nnmem.kernels.

Threads: the parallel kernels (Numba's OpenMP pool) and the GEMMs (OpenBLAS's pool) take turns
on the same cores. By default OpenMP threads spin for a while after each parallel loop, stealing
the cores OpenBLAS needs next (measured here: 4.6x slower training steps on 2 cores). A passive
wait policy makes them sleep instead. It must be set before the OpenMP runtime starts, which
happens at the first parallel kernel call, so setting it when this package is imported works.
A value the user set explicitly is kept.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
