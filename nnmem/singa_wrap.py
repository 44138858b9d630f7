"""SINGA's singa_wrap, as far as SINGA's Python code and example scripts read it.

In SINGA, singa_wrap is the SWIG module of the C++ core; its scripts import it
(``from singa import singa_wrap as singa``) and read the switches SINGA was built with, e.g.
``assert singa.USE_CUDA``. nnmem has no C++ core, so this module holds only those switches,
with nnmem's honest values: USE_CUDA is whether a CUDA device can be created here (numba.cuda
imports and finds a GPU, or the CUDA simulator); USE_DIST whether opt.DistOpt can run (mpi4py
is installed: nnmem's DistOpt runs over MPI, not NCCL); nnmem has no cuDNN, OpenCL, DNNL
(oneDNN) or Java binding, so those are False.

It also holds the C++ core's tensor functions that SINGA's own Python modules call, which a
SINGA-style operator calls on ``x.data`` (here the tensor itself): ``singa.ReLU(x)``,
``singa.__mul__(dy, mask)``, ``singa.SoftMax(x, axis)``, ... They are written with nnmem's
operators in nnmem/ops/core_tensor.py and core_matrix.py (their docstrings state the contract:
inside an operator's forward or backward, each is a part of that operator, recorded in graph
mode and planned like any other operation). Not here: SINGA's cuDNN and CPU handles
(ConvHandle, CudnnRNNHandle, ...) and its Cpu*/Gpu* convolution, pooling, batch-norm and RNN
functions, which nnmem's own operators compute (autograd.conv2d, layer.LSTM, ...), and
Communicator (nnmem's DistOpt runs over MPI: nnmem/communicator.py). nnmem's tensor, device and
autograd modules are written in Python and do not go through this module.

USE_CUDA and USE_DIST are computed when first read, not at import: finding out imports
numba.cuda, which takes half a second and is useless on a machine without a GPU.
"""

import importlib.util

from nnmem import device
from nnmem.ops import core_matrix, core_tensor

__all__ = [
    "USE_CUDA",  # noqa: F822 - made by __getattr__ when first read
    "USE_CUDNN",
    "USE_OPENCL",
    "USE_PYTHON",
    "USE_DNNL",
    "USE_JAVA",
    "USE_DIST",  # noqa: F822 - made by __getattr__ when first read
    *core_tensor.__all__,
    *core_matrix.__all__,
]
globals().update((name, getattr(core_tensor, name)) for name in core_tensor.__all__)
globals().update((name, getattr(core_matrix, name)) for name in core_matrix.__all__)

# SINGA's src/api/config.i.in lists these switches; each is what nnmem provides.
USE_CUDNN = False  # nnmem's CUDA kernels are its own (Numba), not cuDNN's
USE_OPENCL = False
USE_PYTHON = True
USE_DNNL = False
USE_JAVA = False

# SINGA's Python Tensor holds a C++ tensor in `.data`; nnmem's `.data` is the tensor itself, so
# the C++ class is nnmem's Tensor: singa_wrap.Tensor([2, 3]) makes a float32 tensor on the
# default device, and its SWIG methods (GetFloatValue, ...) are nnmem's Tensor methods.


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
