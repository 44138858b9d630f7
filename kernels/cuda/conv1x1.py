"""The CUDA twin of kernels/cpu/conv1x1.py: 1x1 convolutions without padding, any stride.

The CPU kernels exist to skip the im2col path's copies and run one GEMM per sample on x's own
planes. On a GPU the direct kernels of conv.py give every output element its own thread, which
reads its C inputs straight from x, so these twins run them, with the CPU kernels' names,
signatures and checks (as kernels/cuda/conv3x3.py does): an operation that picks "conv1x1" on
the CPU runs unchanged on a GPU. They leave the workspace unused, so its size never changes
their numbers.
"""

from .conv import (
    conv2d_backward_data_direct,
    conv2d_backward_filter_direct,
    conv2d_forward_direct,
)


def conv1x1_forward(y, x, w, workspace, sh, sw, *, stream=0):
    """y = conv2d(x, w), 1x1, stride (sh, sw), no padding (the direct kernel). Writes y."""
    conv2d_forward_direct(y, x, w, sh, sw, 0, 0, stream=stream)


def conv1x1_backward_data(dx, dy, w, workspace, sh, sw, *, stream=0):
    """dx = adjoint of conv1x1 w.r.t. x (the direct kernel). Overwrites dx."""
    conv2d_backward_data_direct(dx, dy, w, sh, sw, 0, 0, stream=stream)


def conv1x1_backward_filter(dw, dy, x, workspace, sh, sw, *, stream=0):
    """dw = adjoint of conv1x1 w.r.t. w (the direct kernel). Overwrites dw."""
    conv2d_backward_filter_direct(dw, dy, x, sh, sw, 0, 0, stream=stream)
