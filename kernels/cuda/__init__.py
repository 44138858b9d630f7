"""CUDA kernels compiled with numba.cuda: the twin of kernels/cpu, name for name.

The kernels (a module here per family, as in kernels/cpu) and their contract are
kernels/contract.py's. Every public name is a HOST function with the CPU kernel's positional
signature plus one keyword-only argument ``stream=0`` (a numba.cuda stream, or 0 for the default
stream). It takes Numba CUDA device arrays (C-contiguous views of one device buffer; ``matmul``
also takes 2-D transposed views), checks shapes and dtypes on the host with the CPU kernel's
error types, and queues one or more ``@cuda.jit`` kernels on ``stream``. It never copies to or
from the host, never synchronises, and never allocates device memory: scratch memory comes from
a ``workspace`` argument where the CPU kernel takes one, and every reduction is designed to need
none (one block per output, a tree in shared memory). So a caller may queue a whole training
step and synchronise once.

Differences from kernels/cpu, all forced by the device: sums are split over threads (float64
where the CPU sums in float64), so results agree with the CPU to rounding, not bit for bit
(except where a kernel says so: dropout masks, argmax, counters, col2im); a bad class label
gives a NaN loss instead of an exception (a kernel cannot raise, and the host never reads device
memory).

Importing this package compiles nothing and needs no GPU: kernels are compiled at their first
launch (``_launch.py``).
"""

from .. import contract

# the family modules, and this package's names: the contract's kernels and tables
MODULES, _namespace = contract.build_namespace(__name__)
globals().update(_namespace)
__all__ = list(contract.KERNELS)
