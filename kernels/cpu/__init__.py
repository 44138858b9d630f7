"""CPU kernels compiled with numba.njit: pure functions over NumPy arrays.

Which kernels there are (a module here per family) and what every one of them promises (outputs
first, nothing allocated, scratch memory as a ``workspace`` argument) is kernels/contract.py's;
nnmem.kernels.cuda keeps the same contract on a GPU. An operation takes its kernels from its
device (``x.device.kernels``), never from this module directly. Each ``name`` is the jitted
alias of a plain Python ``_name`` in its module, so ``NUMBA_DISABLE_JIT=1`` makes all of them
debuggable Python. See each module's docstring for its memory contract.

They are compiled with ``_jit.njit``, which is ``numba.njit`` with Numba's on-disk cache kept
outside the installed package (in Numba's user-wide cache folder, or ``NUMBA_CACHE_DIR``):
``_jit.py`` explains why. The parallel ones run on Numba's TBB threads where the ``tbb`` wheel
is installed (threads.py says why), and the GEMMs on the same threads (gemm.py, blas.py).
"""

from .. import contract
from . import threads

# the family modules, and this package's names: the contract's kernels and tables
MODULES, _namespace = contract.build_namespace(__name__)
globals().update(_namespace)
__all__ = list(contract.KERNELS)

# before any kernel runs: Numba chooses its threading layer at the first parallel launch
threads.load_tbb()
