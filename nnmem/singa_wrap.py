"""SINGA's singa_wrap, as far as SINGA's Python code and example scripts read it.

In SINGA, singa_wrap is the SWIG module of the C++ core; its scripts import it
(``from singa import singa_wrap as singa``) and read the switches SINGA was built with, e.g.
``assert singa.USE_CUDA``. nnmem has no C++ core, so this module holds only those switches,
with nnmem's honest values: USE_CUDA is whether a CUDA device can be created here (numba.cuda
imports and finds a GPU, or the CUDA simulator); USE_DIST whether opt.DistOpt can run (mpi4py
is installed: nnmem's DistOpt runs over MPI, not NCCL); nnmem has no cuDNN, OpenCL, DNNL
(oneDNN) or Java binding, so those are False. The C++ classes SINGA's own modules
call (Tensor, Platform, ...) are not here: nnmem's tensor, device and autograd modules are
written in Python and do not go through this module.

USE_CUDA and USE_DIST are computed when first read, not at import: finding out imports
numba.cuda, which takes half a second and is useless on a machine without a GPU.
"""

import importlib.util

from nnmem import device

__all__ = [
    "USE_CUDA",  # noqa: F822 - made by __getattr__ when first read
    "USE_CUDNN",
    "USE_OPENCL",
    "USE_PYTHON",
    "USE_DNNL",
    "USE_JAVA",
    "USE_DIST",  # noqa: F822 - made by __getattr__ when first read
]

# SINGA's src/api/config.i.in lists these switches; each is what nnmem provides.
USE_CUDNN = False  # nnmem's CUDA kernels are its own (Numba), not cuDNN's
USE_OPENCL = False
USE_PYTHON = True
USE_DNNL = False
USE_JAVA = False


def __getattr__(name):
    if name == "USE_CUDA":
        value = device.get_num_gpus() > 0
        globals()["USE_CUDA"] = value  # computed once: later reads are plain attribute reads
        return value
    if name == "USE_DIST":
        value = importlib.util.find_spec("mpi4py") is not None
        globals()["USE_DIST"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
