"""CPU kernels compiled with numba.njit.

Pure functions over NumPy arrays: outputs first, then inputs, then scalars. Every
kernel writes into the buffers it is given and allocates nothing; kernels that need
scratch memory take a ``workspace`` argument. Each ``name`` is the jitted alias of a
plain Python ``_name`` in its module, so ``NUMBA_DISABLE_JIT=1`` makes all of them
debuggable Python. See each module's docstring for its memory contract.

nnmem.kernels.cuda has the same names and contracts for a GPU; an operation takes its kernels
from its device (``x.device.kernels``), never from this module directly.

They are compiled with ``_jit.njit``, which is ``numba.njit`` with Numba's on-disk cache kept
outside the installed package (in Numba's user-wide cache folder, or ``NUMBA_CACHE_DIR``):
``_jit.py`` explains why. The parallel ones run on Numba's TBB threads where the ``tbb`` wheel
is installed (threads.py says why), and the GEMMs on the same threads (gemm.py, blas.py).
"""

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
    threads,
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
from .strided import BINARY_CODES, MAX_DIMS  # noqa: F401 (tables operators read via a device)
from .unary import *  # noqa: F403
from .unary import UNARY_CODES  # noqa: F401 (a table operators read via a device)

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

threads.load_tbb()  # before any kernel runs: Numba chooses its threading layer at the first
