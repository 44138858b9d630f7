"""How every kernel is compiled: ``numba.njit``, with Numba's disk cache kept out of the package.

Use it exactly like ``numba.njit``: ``njit(cache=True)(f)``, ``njit(parallel=True, cache=True)(f)``.
The only difference is *where* the compiled machine code is cached.

Why not plain ``numba.njit(cache=True)``? Numba's default is to write the cache (``*.nbi`` index
files, ``*.nbc`` code files) into a ``__pycache__`` folder next to the source file. For an installed
package that folder is inside ``site-packages/nnmem/kernels/cpu/``. pip does not know those files
(they are not in the package's RECORD), so ``pip uninstall`` -- or the uninstall step of
``pip install -e .`` -- deletes nnmem's own files but leaves the folders holding them. The leftover
``site-packages/nnmem/`` folder, now without ``__init__.py``, is then imported as an empty
"namespace package" that hides the editable install, and ``import nnmem`` finds no kernels
(``module 'nnmem.kernels.cpu' has no attribute 'relu_forward'``). A package should not write into
its own install folder at run time: it may also be read-only (a system install, a container).

So nnmem's kernels store their cache where Numba stores it for code that has no writable
``__pycache__``: in the user-wide cache folder (``~/.cache/numba`` on Linux), or in
``NUMBA_CACHE_DIR`` when the user sets it. Numba picks the folder with a list of "locator"
classes, tried in order (``CacheImpl._locator_classes`` in ``numba/core/caching.py``: the user's
``NUMBA_CACHE_DIR``, then ``__pycache__`` beside the source, then the user-wide folder, ...). We
keep Numba's machinery and give our dispatchers a cache class whose list leaves out the
``__pycache__`` locator. Nothing process-wide changes: other Numba code in the same process keeps
Numba's defaults, and ``NUMBA_CACHE_DIR`` is only read, never set.

The cache stays safe to reuse: each source folder gets its own sub-folder (named after a hash
of its path, so an installed copy and a checkout never share files), and each index records a
hash of its source file, so an edited kernel is compiled again.

One more thing Numba's cache does not tell apart: settings that change the compiled code for the
whole process, like ``NUMBA_BOUNDSCHECK=1`` (every array index checked, an IndexError instead of a
wild read or write). Numba's cache key is the signature, the CPU and the function's bytecode, not
these settings, so a process run with bounds checks would silently load the unchecked code
cached by an earlier run, or leave its slower checked code for the next normal run. We keep the
checked code in a folder of its own (the same name with ``-boundscheck`` appended).
"""

import functools
import types
import warnings

import numba
from numba.core import caching, config
from numba.core.dispatcher import Dispatcher

__all__ = ["njit", "by_size", "PARALLEL_FROM"]


def _numba_locator(name):
    """A locator class of numba.core.caching: public in recent Numba, "_"-prefixed in 0.60."""
    cls = getattr(caching, name, None)
    return cls if cls is not None else getattr(caching, "_" + name)


def _flavour():
    """Suffix of the cache folder for process-wide settings that change the code Numba generates."""
    return "-boundscheck" if config.BOUNDSCHECK else ""


class _UserProvidedLocator(_numba_locator("UserProvidedCacheLocator")):
    """NUMBA_CACHE_DIR, when the user set it (numba.config.CACHE_DIR); otherwise not used."""

    def get_cache_path(self):
        return super().get_cache_path() + _flavour()


class _UserWideLocator(_numba_locator("UserWideCacheLocator")):
    """The user's cache folder for Numba (~/.cache/numba/ on Linux, per appdirs)."""

    def get_cache_path(self):
        return super().get_cache_path() + _flavour()


class _KernelCacheImpl(caching.CompileResultCacheImpl):
    # Numba's list without its __pycache__ locator (and without IPython's, for notebook cells).
    _locator_classes = [_UserProvidedLocator, _UserWideLocator]


class _KernelCache(caching.FunctionCache):
    """Numba's FunctionCache (the one njit(cache=True) uses), storing where our locators say."""

    _impl_class = _KernelCacheImpl


_warned_no_cache = False


def _attach_cache(dispatcher):
    """Do what ``Dispatcher.enable_caching()`` does, ``self._cache = FunctionCache(self.py_func)``,
    with our cache class instead of FunctionCache.

    If no folder is writable (no home folder, a read-only one), the kernels still work: they are
    compiled in every process, as without ``cache=True``, and a warning says how to keep them.
    """
    global _warned_no_cache
    try:
        dispatcher._cache = _KernelCache(dispatcher.py_func)
    except RuntimeError as e:  # "cannot cache function ...: no locator available"
        if not _warned_no_cache:
            _warned_no_cache = True
            warnings.warn(
                f"nnmem: cannot write Numba's cache ({e}); the kernels are compiled again in "
                "every process. Set NUMBA_CACHE_DIR to a writable folder to keep them.",
                RuntimeWarning,
                stacklevel=3,
            )


def njit(*, cache=False, **options):
    """``numba.njit(**options)``; with ``cache=True``, the code is cached outside the package.

    Every kernel releases the GIL while it runs (``nogil=True``, unless told otherwise): it
    touches no Python object, and another thread -- the copy stream's worker moving tensors to
    host memory, a second model's step -- can then run beside it instead of waiting for it.

    Division follows IEEE, as NumPy's does (``error_model="numpy"``): x / 0 is inf or nan.
    Numba's default, Python's rule, raised ZeroDivisionError from a kernel (SystemError from a
    parallel one), and from an optimizer's update, in the middle of a commit."""
    options.setdefault("nogil", True)
    options.setdefault("error_model", "numpy")

    def decorate(py_func):
        dispatcher = numba.njit(**options)(py_func)
        # With NUMBA_DISABLE_JIT=1, numba.njit returns the plain Python function: nothing to cache.
        if cache and isinstance(dispatcher, Dispatcher):
            _attach_cache(dispatcher)
        return dispatcher

    return decorate


# Elements from which a memory-bound loop runs on every thread. Measured (relu_backward,
# float32, bench/concurrency.py's sweep and a micro-benchmark): on 2 cores, 2^18 elements take
# 91 us serial and 79 us parallel from cold caches, 2^19 201 and 107 us; below 2^17 the
# parallel loop loses (waking the threads costs more than the loop). On a 16-core Xeon the
# serial loops ran at one core's memory bandwidth, the same time with 1 thread or 16.
PARALLEL_FROM = 1 << 18


def _renamed(py_func, suffix):
    """py_func's code under the name `py_func.__name__ + suffix`. Numba names a function's disk
    cache after its qualified name and keys the entries by signature, not by options such as
    ``parallel=True``: two compilations of one function with different options would load each
    other's code from the cache (seen: the parallel one ran the serial code)."""
    renamed = types.FunctionType(
        py_func.__code__,
        py_func.__globals__,
        py_func.__name__ + suffix,
        py_func.__defaults__,
        py_func.__closure__,
    )
    renamed.__qualname__ = py_func.__qualname__ + suffix
    renamed.__module__, renamed.__doc__ = py_func.__module__, py_func.__doc__
    renamed.__kwdefaults__ = py_func.__kwdefaults__
    return renamed


def by_size(py_func, on=0, parallel_from=PARALLEL_FROM):
    """A kernel compiled twice from one source -- serial, and parallel (its ``prange`` loops on
    Numba's threads) -- that runs the parallel one when its positional argument number `on`
    holds at least `parallel_from` elements, the serial one otherwise.

    Memory contract and results are the source's: each element is computed by the same code in
    both, so the two give the same bits (tested), and which one ran never shows in the numbers.
    The parallel one is compiled at its first large call only, and cached under a name of its
    own (``_renamed``)."""
    serial = njit(cache=True)(py_func)
    parallel = njit(parallel=True, cache=True)(_renamed(py_func, "_parallel"))

    def pick(*args):
        """The compiled kernel that these arguments run on."""
        return parallel if args[on].size >= parallel_from else serial

    @functools.wraps(py_func)
    def kernel(*args, **kwargs):
        return pick(*args)(*args, **kwargs)

    kernel.serial, kernel.parallel, kernel.pick = serial, parallel, pick
    return kernel
