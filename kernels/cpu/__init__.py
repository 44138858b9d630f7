"""CPU kernels compiled with numba.njit.

Pure functions over NumPy arrays: outputs first, then inputs, then scalars. Every
kernel writes into the buffers it is given and allocates nothing; kernels that need
scratch memory take a ``workspace`` argument. Each ``name`` is the jitted alias of a
plain Python ``_name`` in its module, so ``NUMBA_DISABLE_JIT=1`` makes all of them
debuggable Python. See each module's docstring for its memory contract.

They are compiled with ``_jit.njit``, which is ``numba.njit`` with Numba's on-disk cache kept
outside the installed package (in Numba's user-wide cache folder, or ``NUMBA_CACHE_DIR``):
``_jit.py`` explains why.
"""

from .batchnorm import (
    batchnorm2d_backward,
    batchnorm2d_forward_apply,
    batchnorm2d_forward_infer,
    batchnorm2d_forward_train,
)
from .conv import (
    col2im,
    conv2d_backward_data_direct,
    conv2d_backward_data_gemm,
    conv2d_backward_filter_direct,
    conv2d_backward_filter_gemm,
    conv2d_forward_direct,
    conv2d_forward_gemm,
    conv2d_gemm_workspace_per_sample,
    conv2d_output_shape,
    im2col,
)
from .elementwise import (
    add,
    add_bias_nchw,
    add_bias_rows,
    axpy,
    copy,
    dropout_backward,
    dropout_forward,
    fill,
    mul,
    relu_backward,
    relu_forward,
    scale,
    sigmoid_backward,
    sigmoid_forward,
    sub,
)
from .gemm import matmul
from .loss import (
    mse_backward,
    mse_forward,
    softmax_cross_entropy_backward,
    softmax_cross_entropy_backward_onehot,
    softmax_cross_entropy_forward,
    softmax_cross_entropy_forward_onehot,
)
from .lrn import lrn_backward, lrn_forward
from .optim import adam_update, sgd_update
from .pool import (
    avgpool2d_backward,
    avgpool2d_forward,
    maxpool2d_backward,
    maxpool2d_forward,
    pool2d_output_shape,
)
from .reduce import bias_grad_nchw, sum_rows

__all__ = [
    # conv
    "conv2d_output_shape",
    "conv2d_forward_direct",
    "conv2d_backward_data_direct",
    "conv2d_backward_filter_direct",
    "im2col",
    "col2im",
    "conv2d_gemm_workspace_per_sample",
    "conv2d_forward_gemm",
    "conv2d_backward_data_gemm",
    "conv2d_backward_filter_gemm",
    # pool
    "pool2d_output_shape",
    "maxpool2d_forward",
    "maxpool2d_backward",
    "avgpool2d_forward",
    "avgpool2d_backward",
    # batchnorm
    "batchnorm2d_forward_train",
    "batchnorm2d_forward_apply",
    "batchnorm2d_forward_infer",
    "batchnorm2d_backward",
    # elementwise
    "relu_forward",
    "relu_backward",
    "sigmoid_forward",
    "sigmoid_backward",
    "add",
    "sub",
    "mul",
    "axpy",
    "scale",
    "fill",
    "copy",
    "dropout_forward",
    "dropout_backward",
    "add_bias_rows",
    "add_bias_nchw",
    # lrn
    "lrn_forward",
    "lrn_backward",
    # reduce
    "sum_rows",
    "bias_grad_nchw",
    # gemm
    "matmul",
    # loss
    "softmax_cross_entropy_forward",
    "softmax_cross_entropy_backward",
    "softmax_cross_entropy_forward_onehot",
    "softmax_cross_entropy_backward_onehot",
    "mse_forward",
    "mse_backward",
    # optim
    "sgd_update",
    "adam_update",
]
