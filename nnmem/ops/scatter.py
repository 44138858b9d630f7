"""ScatterElements (ONNX's, SINGA's autograd.scatter_elements): x with elements replaced.

    y = x;  y[i_0, ..., indices[i], ..., i_{r-1}] = updates[i]   (indices[i] at position `axis`)
    dx = dy, with 0 wherever an update landed (y does not depend on x there)

for every multi-index i = (i_0, ..., i_{r-1}) of `indices`, which has x's rank and no axis
longer than x's; `updates` has the indices' shape. An index may count from the end of the axis
(-size <= index < 0). As in SINGA, the indices and updates are the operator's constants, not
inputs: updates gets no gradient, and ``y.creator.backward(dy)`` returns dx alone.

Memory contract: backward keeps the int32 indices, not x, y or the updates, which are dropped
once forward has run; the kernels (kernels/cpu/scatter.py) write y and dx and allocate nothing.
"""

import numpy as np

from nnmem.operation import Operator
from nnmem.ops.composite import as_tensor
from nnmem.ops.strides import axis_index, check_rank, contiguous_strides, pad
from nnmem.tensor import Tensor

__all__ = ["ScatterElements", "scatter_elements"]


class ScatterElements(Operator):
    """y = x with updates written at indices along `axis` (see the module's docstring).
    `indices`: an int32 tensor, or integers as an array or nested lists; `updates`: a tensor
    of x's dtype, or numbers as an array or nested lists."""

    def __init__(self, indices, updates, axis=0):
        super().__init__()
        self.indices, self.updates, self.axis = indices, updates, axis

    def forward(self, x):
        indices, updates = _as_indices(self.indices, x), as_tensor(self.updates, x)
        self.indices = self.updates = None  # constants: held no longer than forward needs them
        for name, t in (("indices", indices), ("updates", updates)):
            if t.device is not x.device:
                raise ValueError(
                    f"scatter_elements: {name} on {t.device}, data on {x.device}; move them "
                    "to one device"
                )
        r = x.ndim()
        check_rank("scatter_elements", x.shape)
        axis = axis_index("scatter_elements", self.axis, r)
        if indices.ndim() != r or any(i > n for i, n in zip(indices.shape, x.shape)):
            raise ValueError(
                f"scatter_elements: indices of shape {indices.shape} for data of shape "
                f"{x.shape}; give indices of the data's rank, no axis longer than the data's"
            )
        if updates.shape != indices.shape:
            raise ValueError(
                f"scatter_elements: updates of shape {updates.shape} for indices of shape "
                f"{indices.shape}; give one update per index"
            )
        strides = list(contiguous_strides(x.shape))
        axis_stride, strides[axis] = strides[axis], 0
        self.args = (pad(indices.shape, 1), pad(strides, 0), axis_stride, x.shape[axis])
        K, args = self.kernels, self.args
        y = self.output(x.shape, x.dtype)
        self.run(
            lambda y_, x_, i_, u_: K.scatter_elements_forward(
                y_.reshape(-1), x_.reshape(-1), i_.reshape(-1), u_.reshape(-1), *args
            ),
            reads=(x, indices, updates),
            writes=(y,),
        )
        self.save(indices)
        return y

    def backward(self, dy):
        (indices,) = self.saved
        K, args = self.kernels, self.args
        dx = self.output(dy.shape, dy.dtype)
        self.run(
            lambda dx_, dy_, i_: K.scatter_elements_backward(
                dx_.reshape(-1), dy_.reshape(-1), i_.reshape(-1), *args
            ),
            reads=(dy, indices),
            writes=(dx,),
        )
        return dx


def _as_indices(indices, x):
    """The indices as a constant int32 tensor on x's device."""
    if isinstance(indices, Tensor):
        if indices.dtype != np.int32:
            raise TypeError(
                f"scatter_elements: indices of dtype {indices.dtype}; give int32 indices "
                "(t.as_type(tensor.int32))"
            )
        return Tensor._on_block(indices.block, indices.shape, indices.dtype, indices.device)
    a = np.asarray(indices)
    if a.dtype.kind not in "iu" or np.abs(a).max(initial=0) > np.iinfo(np.int32).max:
        raise TypeError(
            f"scatter_elements: indices of dtype {a.dtype}; give integers within int32's range"
        )
    a = a.astype(np.int32)
    return Tensor(a.shape, x.device, a.dtype, requires_grad=False).copy_from_numpy(a)


def scatter_elements(x, indices, updates, axis=0):
    """SINGA's autograd.scatter_elements(x, indices, updates, axis): x with `updates` written
    at `indices` along `axis` (ONNX's ScatterElements, reduction 'none')."""
    return ScatterElements(indices, updates, axis)(x)
