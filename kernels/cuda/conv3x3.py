"""The CUDA twin of kernels/cpu/conv3x3.py: 3x3 convolutions with stride 1 and padding 1.

The CPU kernels exist because the CPU's im2col + GEMM path is slow for few channels (see that
module). On a GPU, the direct kernels of conv.py already give every output element its own
thread, so these twins run them, with the CPU kernels' names, signatures and checks: an
operation that picks "conv3x3" on the CPU runs unchanged on a GPU. They leave the workspace
unused, so its size never changes their numbers (as on the CPU, where no pass depends on it).
"""

from .conv import (
    conv2d_backward_data_direct,
    conv2d_backward_filter_direct,
    conv2d_forward_direct,
)


def conv3x3_forward(y, x, w, workspace, *, stream=0):
    """y = conv2d(x, w), 3x3, stride 1, padding 1 (the direct kernel). Writes y."""
    conv2d_forward_direct(y, x, w, 1, 1, 1, 1, stream=stream)


def conv3x3_backward_data(dx, dy, w, workspace, *, stream=0):
    """dx = adjoint of conv3x3 w.r.t. x (the direct kernel). Overwrites dx."""
    conv2d_backward_data_direct(dx, dy, w, 1, 1, 1, 1, stream=stream)


def conv3x3_backward_filter(dw, dy, x, workspace, *, stream=0):
    """dw = adjoint of conv3x3 w.r.t. w (the direct kernel). Overwrites dw."""
    conv2d_backward_filter_direct(dw, dy, x, 1, 1, 1, 1, stream=stream)
