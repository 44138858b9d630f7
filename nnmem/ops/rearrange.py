"""ONNX-style operators that rearrange elements, built on the strided maps and views:
slice, split, gather, tile, expand, pad, upsample (nearest), depth_to_space, space_to_depth.

Slicing, padding and expanding are real operators (a strided gather; a fill plus a strided
scatter; a gather with stride 0 along the broadcast axes; the reverse maps for their
gradients). The others are compositions: split and gather are slices (gather concatenates one
slice per index, as SINGA's does; an embedding lookup is the Embedding operator), tile a
concatenation, upsample an expand between reshapes per scaled axis, depth_to_space and
space_to_depth a reshape, a 6-D transpose and a reshape. Their gradients come from those parts.
"""

import builtins
import math

import numpy as np

from nnmem.operation import Operator
from nnmem.ops.arith import Reshape
from nnmem.ops.broadcast import reduce_to
from nnmem.ops.embedding import Embedding
from nnmem.ops.shape import cat
from nnmem.ops.strides import (
    axis_index,
    broadcast_shape,
    broadcast_strides,
    check_rank,
    contiguous_strides,
)
from nnmem.ops.strides import pad as padded
from nnmem.ops.transform import Slice, transpose
from nnmem.tensor import Tensor, to_numpy

__all__ = [
    "Expand",
    "Pad",
    "depth_to_space",
    "expand",
    "gather",
    "pad",
    "slice",
    "space_to_depth",
    "split",
    "tile",
    "upsample",
]

_ALL = builtins.slice(None)


def slice(x, starts, ends, axes=None, steps=None):  # noqa: A001 (ONNX's and SINGA's name)
    """x[starts[i]:ends[i]:steps[i]] along axes[i] (the first len(starts) axes by default)."""
    if axes is None:
        axes = list(range(len(starts)))
    axes = [axis_index("slice", a, x.ndim()) for a in axes]
    steps = [1] * len(starts) if steps is None else list(steps)
    key = [_ALL] * x.ndim()
    for axis, start, end, step in zip(axes, starts, ends, steps):
        key[axis] = builtins.slice(start, end, step)
    return Slice(tuple(key))(x)


def split(x, axis, parts, num_output=None):
    """Pieces of x along `axis` of the sizes in `parts` (or `num_output` equal pieces)."""
    axis = axis_index("split", axis, x.ndim())
    if parts is None:
        if not num_output or x.shape[axis] % num_output:
            raise ValueError(f"split: {num_output} equal parts of an axis of {x.shape[axis]}")
        parts = [x.shape[axis] // num_output] * num_output
    if any(size < 0 for size in parts) or sum(parts) != x.shape[axis]:
        raise ValueError(f"split: parts {list(parts)} do not add up to {x.shape[axis]}")
    pieces, start = [], 0
    for size in parts:
        pieces.append(slice(x, [start], [start + size], [axis]))
        start += size
    return tuple(pieces)


def gather(x, axis, indices):
    """Entries `indices` of x along `axis`: output rank rank(indices) + rank(x) - 1, as ONNX's
    Gather. `indices`: a list of ints, a list of lists, or a tensor. An int32 tensor along axis
    0 (an embedding lookup: token ids into a table) is one Embedding operator: the ids are read
    on the device, the gradient is summed into x's rows, and an id outside 0..rows-1 raises.
    Other tensors' values are read on the host and taken as lists (negative ids count from the
    end)."""
    axis = axis_index("gather", axis, x.ndim())
    size = x.shape[axis]
    if isinstance(indices, Tensor):
        if axis == 0 and indices.dtype == np.int32:
            table = x if x.ndim() == 2 else Reshape((size, math.prod(x.shape[1:])))(x)
            y = Embedding()(indices, table)
            return y if x.ndim() == 2 else Reshape(indices.shape + x.shape[1:])(y)
        indices = to_numpy(indices).tolist()

    def pick(index):
        if not -size <= index < size:
            raise IndexError(f"gather: index {index} is out of range for an axis of {size}")
        return slice(x, [index % size], [index % size + 1], [axis])

    def take(ids):
        return cat([pick(int(i)) for i in ids], axis)

    nested = len(indices) and isinstance(indices[0], (list, tuple))
    if not nested:
        return take(indices)
    rows = [take(ids) for ids in indices]
    shape = list(rows[0].shape)
    shape.insert(axis, 1)
    return cat([Reshape(tuple(shape))(r) for r in rows], axis)


def tile(x, repeats):
    """x repeated repeats[i] times along axis i (leading axes added when repeats is longer)."""
    if len(repeats) > x.ndim():
        x = Reshape((1,) * (len(repeats) - x.ndim()) + x.shape)(x)
    for axis, count in enumerate(repeats):
        if count != 1:
            x = cat([x] * count, axis)
    return x


class Expand(Operator):
    """y = x broadcast to `shape` (NumPy's rules), materialised: a strided gather with stride 0
    along the broadcast axes; the gradient sums dy back over them."""

    def __init__(self, shape):
        super().__init__()
        self.shape = tuple(int(s) for s in shape)

    def forward(self, x):
        target = broadcast_shape("expand", x.shape, self.shape)
        check_rank("expand", target)
        y = self.output(target, x.dtype)
        kern, args = (
            self.kernels.strided_gather,
            (padded(target, 1), broadcast_strides(x.shape, target), 0),
        )
        self.run(lambda y_, x_: kern(y_.reshape(-1), x_.reshape(-1), *args), (x,), (y,))
        self.x_shape = x.shape
        return y

    def backward(self, dy):
        return reduce_to(self, dy, self.x_shape)


def expand(x, shape):
    """x broadcast to `shape` (NumPy's rules), materialised."""
    return Expand(shape)(x)


def upsample(x, mode, scales):
    """Nearest-neighbour upsampling by integer `scales` per axis (ONNX's UpSample)."""
    if mode != "nearest":
        raise NotImplementedError(f"upsample: mode {mode!r}; only 'nearest' is implemented")
    scales = [int(s) for s in scales]
    if len(scales) != x.ndim() or any(s < 1 for s in scales):
        raise ValueError(f"upsample: one integer scale >= 1 per axis of {x.shape}, not {scales}")
    for axis, s in enumerate(scales):  # one axis at a time: a 4-D view (before, n, s, after)
        if s == 1:
            continue
        before, n, after = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1 :])
        y = expand(Reshape((before, n, 1, after))(x), (before, n, s, after))
        x = Reshape(x.shape[:axis] + (n * s,) + x.shape[axis + 1 :])(y)
    return x


def depth_to_space(x, blocksize, mode="DCR"):
    """(N, C*b*b, H, W) -> (N, C, H*b, W*b): depth moved into b x b blocks (ONNX)."""
    n, c, h, w = x.shape
    b, out = blocksize, c // blocksize**2
    if mode.upper() == "DCR":
        y = transpose(Reshape((n, b, b, out, h, w))(x), (0, 3, 4, 1, 5, 2))
    elif mode.upper() == "CRD":
        y = transpose(Reshape((n, out, b, b, h, w))(x), (0, 1, 4, 2, 5, 3))
    else:
        raise ValueError(f"depth_to_space: mode {mode!r}; 'DCR' or 'CRD'")
    return Reshape((n, out, h * b, w * b))(y)


def space_to_depth(x, blocksize, mode="DCR"):
    """(N, C, H*b, W*b) -> (N, C*b*b, H, W), the inverse of depth_to_space (DCR order)."""
    if mode.upper() != "DCR":
        raise NotImplementedError(f"space_to_depth: mode {mode!r}; only 'DCR' (SINGA's)")
    n, c, hb, wb = x.shape
    b = blocksize
    y = transpose(Reshape((n, c, hb // b, b, wb // b, b))(x), (0, 3, 5, 1, 2, 4))
    return Reshape((n, c * b * b, hb // b, wb // b))(y)


class Pad(Operator):
    """Constant padding: y = `value` everywhere, x copied into the interior. pads is ONNX's
    [begin_0, begin_1, ..., end_0, end_1, ...]; the gradient is dy's interior."""

    def __init__(self, pads, value=0.0):
        super().__init__()
        self.pads, self.value = [int(p) for p in pads], float(value)

    def forward(self, x):
        n = x.ndim()
        if len(self.pads) != 2 * n or any(p < 0 for p in self.pads):
            raise ValueError(f"pad: {2 * n} non-negative pads for a {n}-D tensor, not {self.pads}")
        check_rank("pad", x.shape)
        shape = tuple(s + self.pads[i] + self.pads[i + n] for i, s in enumerate(x.shape))
        strides = contiguous_strides(shape)
        offset = sum(p * st for p, st in zip(self.pads[:n], strides))
        self.args = (padded(x.shape, 1), padded(strides, 0), offset)
        y = self.output(shape, x.dtype)
        K, args, value = self.kernels, self.args, self.value

        def kernel(y_, x_):
            K.fill(y_.reshape(-1), value)
            K.strided_scatter(y_.reshape(-1), x_.reshape(-1), *args)

        self.run(kernel, reads=(x,), writes=(y,))
        self.x_shape = x.shape
        return y

    def backward(self, dy):
        dx = self.output(self.x_shape, dy.dtype)
        kern, args = self.kernels.strided_gather, self.args
        self.run(lambda dx_, dy_: kern(dx_.reshape(-1), dy_.reshape(-1), *args), (dy,), (dx,))
        return dx


def pad(x, mode, pads, constant=0.0):
    """Pad x (ONNX's pads); mode 'constant' (reflect and edge are not implemented)."""
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r}; only 'constant' is implemented")
    return Pad(pads, constant)(x)
