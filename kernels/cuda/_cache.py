"""Numba's disk cache for the CUDA kernels, kept out of the installed package.

Without a cache every process compiles each kernel again at its first launch (0.1 to 0.4 s
each, some 40 kernels: tens of seconds before a first GPU step). ``cuda.jit(cache=True)`` would
write the cache next to the source, inside site-packages, which breaks ``pip uninstall`` and a
later editable install: kernels/cpu/_jit.py tells that story. So, as for the CPU kernels, the
cache goes to NUMBA_CACHE_DIR when set, else to Numba's user-wide cache folder: numba-cuda's
own cache classes (its ``CUDACache``, which keys entries by signature, GPU architecture and the
kernel's source), with the ``__pycache__``-beside-the-source locator left out.

No cache on the CUDA simulator (``cuda.jit`` makes Python objects there, nothing to cache),
nor with the numba.cuda that older Numba releases ship inside Numba itself (without the
numba-cuda package: its cache classes live elsewhere, and the `cuda` extra installs numba-cuda).
"""

from numba import config

try:
    if config.ENABLE_CUDASIM:
        raise ImportError("the simulator compiles nothing")
    from numba.cuda.core import caching
    from numba.cuda.dispatcher import CUDACache, CUDACacheImpl
except ImportError:
    KernelCache = None
else:

    class _ImplOutsideThePackage(CUDACacheImpl):
        _locator_classes = [caching._UserProvidedCacheLocator, caching._UserWideCacheLocator]

    class KernelCache(CUDACache):
        """numba-cuda's kernel cache, stored in NUMBA_CACHE_DIR or the user-wide folder."""

        _impl_class = _ImplOutsideThePackage


def attach_cache(dispatcher):
    """Give a ``cuda.jit`` dispatcher the cache above (what ``enable_caching()`` does with
    CUDACache). Without a writable folder the kernel works uncached, compiled per process."""
    if KernelCache is None:
        return
    try:
        dispatcher._cache = KernelCache(dispatcher.py_func)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        pass
