"""CUDA kernels compiled with numba.cuda: the twin of kernels/cpu, name for name.

Every public name is a HOST function with the CPU kernel's positional signature (outputs first,
then inputs, then scalars) plus one keyword-only argument ``stream=0`` (a numba.cuda stream, or
0 for the default stream). It takes Numba CUDA device arrays (C-contiguous views of one device
buffer; ``matmul`` also takes 2-D transposed views), checks shapes and dtypes on the host with
the CPU kernel's error types, and queues one or more ``@cuda.jit`` kernels on ``stream``. It
never copies to or from the host, never synchronises, and never allocates device memory:
scratch memory comes from a ``workspace`` argument where the CPU kernel takes one, and every
reduction is designed to need none (one block per output, a tree in shared memory). So a caller
may queue a whole training step and synchronise once.

Differences from kernels/cpu, all forced by the device: sums are split over threads (float64
where the CPU sums in float64), so results agree with the CPU to rounding, not bit for bit
(except where a kernel says so: dropout masks, argmax, counters, col2im); a bad class label
gives a NaN loss instead of an exception (a kernel cannot raise, and the host never reads device
memory); max-pooling backward adds with atomics (see pool.py).

Importing this package compiles nothing and needs no GPU: kernels are compiled at their first
launch (``_launch.py``). Pure host helpers (``conv2d_output_shape``, ``pool2d_output_shape``,
``conv2d_gemm_workspace_per_sample``, ``conv3x3_applies``, ``conv3x3_workspace_per_sample``) are
the CPU modules' own functions.
"""

from ..cpu.strided import BINARY_CODES, MAX_DIMS  # noqa: F401 (tables operators read via a device)
from ..cpu.unary import UNARY_CODES  # noqa: F401 (a table operators read via a device)
from . import (
    batchnorm,
    concat,
    conv,
    conv3x3,
    elementwise,
    embedding,
    gemm,
    loss,
    lrn,
    optim,
    pool,
    reduce,
    softmax,
    strided,
    unary,
)
from .batchnorm import *  # noqa: F403
from .concat import *  # noqa: F403
from .conv import *  # noqa: F403
from .conv3x3 import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .embedding import *  # noqa: F403
from .gemm import *  # noqa: F403
from .loss import *  # noqa: F403
from .lrn import *  # noqa: F403
from .optim import *  # noqa: F403
from .pool import *  # noqa: F403
from .reduce import *  # noqa: F403
from .softmax import *  # noqa: F403
from .strided import *  # noqa: F403
from .unary import *  # noqa: F403

# The same modules in the same order as kernels/cpu, so the two __all__ lists match name for name.
MODULES = (
    conv,
    conv3x3,
    pool,
    batchnorm,
    elementwise,
    unary,
    strided,
    softmax,
    embedding,
    concat,
    lrn,
    reduce,
    gemm,
    loss,
    optim,
)
__all__ = [name for module in MODULES for name in module.__all__]
