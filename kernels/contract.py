"""The kernel contract: which kernels every backend has, by family, and the codes they take.

Both backends, ``cpu/`` (numba.njit) and ``cuda/`` (numba.cuda), are built from this one list:
each has a module per family below, which defines that family's kernels, and its package's
namespace is every kernel named here, in this order (``build_namespace``), plus the tables at
the end of this file. An operation takes its kernels from its device (``x.device.kernels``) by
these names, and so runs unchanged on either backend. What every kernel promises:

* the same name and the same positional arguments in cpu/ and cuda/: outputs first, then
  inputs, then scalars (a CUDA kernel adds one keyword-only argument, ``stream=0``);
* it writes into the output buffers it is given, and never allocates memory of its own;
* scratch memory is an argument too: a kernel that needs some takes a ``workspace`` (its size
  comes from a host-side helper of kernels/sizes.py, never from the kernel);
* a bad shape or dtype raises ValueError or TypeError, with the same type on both backends.

Adding a kernel: write it in the family's module of cpu/ and of cuda/, then name it here;
importing a backend that lacks a kernel named here fails, naming what is missing.
"""

import importlib

#: family (a module of cpu/ and of cuda/) -> its kernels, in the order of the namespace
FAMILIES = {
    "conv": (
        "conv2d_forward_direct",
        "conv2d_backward_data_direct",
        "conv2d_backward_filter_direct",
        "im2col",
        "col2im",
        "conv2d_forward_gemm",
        "conv2d_backward_data_gemm",
        "conv2d_backward_filter_gemm",
    ),
    "conv3x3": ("conv3x3_forward", "conv3x3_backward_data", "conv3x3_backward_filter"),
    "pool": ("maxpool2d_forward", "maxpool2d_backward", "avgpool2d_forward", "avgpool2d_backward"),
    "batchnorm": (
        "batchnorm2d_forward_train",
        "batchnorm2d_forward_apply",
        "batchnorm2d_forward_infer",
        "batchnorm2d_backward",
    ),
    "elementwise": (
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
        "increment",
        "add_bias_rows",
        "add_bias_nchw",
    ),
    "unary": ("unary_forward", "unary_backward"),
    "cast": ("cast",),
    "strided": ("strided_gather", "strided_scatter", "reduce_sum", "broadcast_binary"),
    "softmax": ("softmax_forward", "softmax_backward"),
    "embedding": ("embedding_forward", "embedding_backward"),
    "scatter": ("scatter_elements_forward", "scatter_elements_backward"),
    "concat": ("concat_copy_in", "concat_copy_out"),
    "lrn": ("lrn_forward", "lrn_backward"),
    "layernorm": ("layernorm_forward", "layernorm_backward_data", "layernorm_backward_scale"),
    "reduce": ("sum_rows", "bias_grad_nchw", "count_nonfinite"),
    "gemm": ("matmul",),
    "loss": (
        "softmax_cross_entropy_forward",
        "softmax_cross_entropy_backward",
        "softmax_cross_entropy_forward_onehot",
        "softmax_cross_entropy_backward_onehot",
        "mse_forward",
        "mse_backward",
    ),
    "optim": ("sgd_update", "adam_update", "rmsprop_update", "adagrad_update"),
    # one pass where graph mode's fusion (nnmem/graph/fuse.py) finds two or three: each gives the
    # bits of the unfused kernels it replaces, run one after the other
    "fused": (
        "batchnorm2d_relu_forward_train",
        "batchnorm2d_relu_forward_apply",
        "batchnorm2d_relu_backward",
        "batchnorm2d_add_relu_forward_train",
        "batchnorm2d_add_relu_forward_apply",
        "batchnorm2d_add_relu_backward",
        "add_bias_relu_nchw",
        "relu_backward_bias_grad_nchw",
        "add_bias_rows_relu",
        "relu_backward_sum_rows",
    ),
    # the direct paths of ResNet's downsampling convolutions (3x3 stride 2, 1x1 any stride),
    # which conv.py's "auto" picks over im2col + GEMM on a CPU
    "conv3x3s2": ("conv3x3s2_forward", "conv3x3s2_backward_data", "conv3x3s2_backward_filter"),
    "conv1x1": ("conv1x1_forward", "conv1x1_backward_data", "conv1x1_backward_filter"),
}

#: every kernel, family by family: a backend's ``__all__``
KERNELS = tuple(name for names in FAMILIES.values() for name in names)

#: The strided kernels take shapes and strides padded to this many axes.
MAX_DIMS = 6

#: unary_forward's and unary_backward's functions, and their codes by name as operators ask for
#: them (``device.kernels.UNARY_CODES["tanh"]``); kernels/cpu/unary.py says what each computes.
UNARY_CODES = {
    name: code
    for code, name in enumerate(
        "tanh exp log square sqrt abs leakyrelu reciprocal pow add_scalar "
        "sin cos tan sinh cosh asin acos atan asinh acosh atanh erf "
        "softplus softsign elu selu hardsigmoid clip "
        "sign ceil floor round rounde gt ge lt le eq gelu gelu_tanh".split()
    )
}

#: broadcast_binary's operations, and their codes by name as operators ask for them
#: (``device.kernels.BINARY_CODES["add"]``). pow_da and pow_db are the partial derivatives of
#: u^v (v u^(v-1) and u^v log u), which the power's backward multiplies by dy.
BINARY_CODES = {
    name: code
    for code, name in enumerate(
        "add sub mul div pow max min gt ge lt le eq and or xor pow_da pow_db".split()
    )
}

#: the tables a backend's namespace has beside its kernels (operators read them via a device)
TABLES = {"BINARY_CODES": BINARY_CODES, "MAX_DIMS": MAX_DIMS, "UNARY_CODES": UNARY_CODES}


def build_namespace(backend):
    """(family modules, namespace) of the backend package named `backend`: its module of each
    family imported in FAMILIES's order, and every kernel of KERNELS and table of TABLES by
    name. A family module that lacks one of its kernels raises AttributeError, naming it."""
    modules, namespace = [], dict(TABLES)
    for family, names in FAMILIES.items():
        module = importlib.import_module(f"{backend}.{family}")
        missing = [name for name in names if not hasattr(module, name)]
        if missing:
            raise AttributeError(
                f"{module.__name__} lacks {', '.join(missing)}, which kernels/contract.py "
                f"lists in the family {family!r}"
            )
        modules.append(module)
        namespace.update((name, getattr(module, name)) for name in names)
    return tuple(modules), namespace
