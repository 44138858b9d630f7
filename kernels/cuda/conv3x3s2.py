"""The CUDA twin of kernels/cpu/conv3x3s2.py: 3x3 convolutions with stride 2 and padding 1.

The CPU kernels split the input into phase planes so that a stride-2 window's reads are
contiguous loads again. On a GPU the direct kernels of conv.py already give every output
element its own thread, whose reads are strided anyway, so these twins run them, with the CPU
kernels' names, signatures and checks (as kernels/cuda/conv3x3.py does for stride 1): an
operation that picks "conv3x3s2" on the CPU runs unchanged on a GPU. They leave the workspace
unused, so its size never changes their numbers.
"""

from .conv import (
    conv2d_backward_data_direct,
    conv2d_backward_filter_direct,
    conv2d_forward_direct,
)


def conv3x3s2_forward(y, x, w, workspace, *, stream=0):
    """y = conv2d(x, w), 3x3, stride 2, padding 1 (the direct kernel). Writes y."""
    conv2d_forward_direct(y, x, w, 2, 2, 1, 1, stream=stream)


def conv3x3s2_backward_data(dx, dy, w, workspace, *, stream=0):
    """dx = adjoint of conv3x3s2 w.r.t. x (the direct kernel). Overwrites dx."""
    conv2d_backward_data_direct(dx, dy, w, 2, 2, 1, 1, stream=stream)


def conv3x3s2_backward_filter(dw, dy, x, workspace, *, stream=0):
    """dw = adjoint of conv3x3s2 w.r.t. w (the direct kernel). Overwrites dw."""
    conv2d_backward_filter_direct(dw, dy, x, 2, 2, 1, 1, stream=stream)
