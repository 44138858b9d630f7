"""ONNX-style operators that rearrange elements, built on the strided maps and views:
slice, split, gather, tile, expand, pad, upsample (nearest), depth_to_space, space_to_depth.

Slicing, splitting, constant padding and expanding are real operators (a strided gather;
column blocks, shape.Split; a fill plus a strided scatter; a gather with stride 0 along the
broadcast axes; the reverse maps for their gradients). The others are composites
(nnmem/ops/composite.py): gather concatenates one slice per index, as SINGA's does (an
embedding lookup is the Embedding operator), tile is a concatenation, reflect and edge padding
concatenate runs of x's entries (slices, reversed for reflect) around it, upsample an expand
between reshapes per scaled axis, depth_to_space and space_to_depth a reshape, a 6-D transpose
and a reshape. Their gradients come from those parts.
"""

import builtins
import math

import numpy as np

from nnmem.operation import Operator
from nnmem.ops.arith import Reshape
from nnmem.ops.broadcast import reduce_to
from nnmem.ops.composite import Composite, as_constant
from nnmem.ops.embedding import Embedding
from nnmem.ops.shape import Split, cat
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
    if parts is None:
        size = x.shape[axis_index("split", axis, x.ndim())]
        if not num_output or size % num_output:
            raise ValueError(f"split: {num_output} equal parts of an axis of {size}")
        parts = [size // num_output] * num_output
    return Split(axis, parts)(x)


class Rearrangement(Composite):
    """y = steps(x), a composite of slices, concatenations, reshapes and transposes: `steps` is
    a function of x written with them. Its backward returns dx."""

    def __init__(self, name, steps):
        super().__init__(name, steps=steps)

    def compose(self, x, steps):
        return steps(x)


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
            ids = as_constant(indices)
            return Rearrangement("Gather", lambda x: _lookup(x, ids))(x)
        indices = to_numpy(indices).tolist()
    ids = indices if len(indices) and isinstance(indices[0], (list, tuple)) else [indices]
    for index in (i for row in ids for i in row):
        if not -size <= int(index) < size:
            raise IndexError(f"gather: index {index} is out of range for an axis of {size}")
    return Rearrangement("Gather", lambda x: _take(x, axis, indices))(x)


def _lookup(x, ids):
    """x's rows `ids` (an int32 tensor): one Embedding on x viewed as (rows, the rest)."""
    table = x if x.ndim() == 2 else Reshape((x.shape[0], math.prod(x.shape[1:])))(x)
    y = Embedding()(ids, table)
    return y if x.ndim() == 2 else Reshape(ids.shape + x.shape[1:])(y)


def _take(x, axis, indices):
    size = x.shape[axis]

    def take(ids):
        return cat([slice(x, [int(i) % size], [int(i) % size + 1], [axis]) for i in ids], axis)

    if not (len(indices) and isinstance(indices[0], (list, tuple))):
        return take(indices)
    rows = [take(ids) for ids in indices]
    shape = list(rows[0].shape)
    shape.insert(axis, 1)
    return cat([Reshape(tuple(shape))(r) for r in rows], axis)


def tile(x, repeats):
    """x repeated as NumPy's tile: repeats[i] times along axis i, repeats (or an int) and x's
    shape aligned from the last axis (leading axes added to the shorter one, of size 1)."""
    repeats = [int(repeats)] if isinstance(repeats, (int, np.integer)) else list(repeats)
    repeats = [1] * (x.ndim() - len(repeats)) + repeats
    return Rearrangement("Tile", lambda x: _tiled(x, repeats))(x)


def _tiled(x, repeats):
    x = Reshape((1,) * (len(repeats) - x.ndim()) + x.shape)(x)  # a view: new even if all is 1
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
    return Rearrangement("UpSample", lambda x: _upsampled(x, scales))(x)


def _upsampled(x, scales):
    for axis, s in enumerate(scales):  # one axis at a time: a 4-D view (before, n, s, after)
        if s == 1:
            continue
        before, n, after = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1 :])
        y = expand(Reshape((before, n, 1, after))(x), (before, n, s, after))
        x = Reshape(x.shape[:axis] + (n * s,) + x.shape[axis + 1 :])(y)
    return x if any(s != 1 for s in scales) else Reshape(x.shape)(x)  # a new tensor, always


#: depth_to_space's permutation of (N, b, b, C, H, W) (DCR) or (N, C, b, b, H, W) (CRD) into
#: (N, C, H, b, W, b); space_to_depth's is its inverse.
_TO_SPACE = {"DCR": (0, 3, 4, 1, 5, 2), "CRD": (0, 1, 4, 2, 5, 3)}


def _mode(op, mode):
    if not isinstance(mode, str) or mode.upper() not in _TO_SPACE:
        raise ValueError(f"{op}: mode {mode!r}; 'DCR' or 'CRD'")
    return mode.upper()


def depth_to_space(x, blocksize, mode="DCR"):
    """(N, C*b*b, H, W) -> (N, C, H*b, W*b): depth moved into b x b blocks (ONNX)."""
    mode, (n, c, h, w), b = _mode("depth_to_space", mode), x.shape, blocksize
    out = c // b**2
    depth = (n, b, b, out, h, w) if mode == "DCR" else (n, out, b, b, h, w)

    def steps(x):
        y = transpose(Reshape(depth)(x), _TO_SPACE[mode])
        return Reshape((n, out, h * b, w * b))(y)

    return Rearrangement("DepthToSpace", steps)(x)


def space_to_depth(x, blocksize, mode="DCR"):
    """(N, C, H*b, W*b) -> (N, C*b*b, H, W), the inverse of depth_to_space in the same mode."""
    mode, (n, c, hb, wb), b = _mode("space_to_depth", mode), x.shape, blocksize
    inverse = tuple(int(i) for i in np.argsort(_TO_SPACE[mode]))

    def steps(x):
        y = transpose(Reshape((n, c, hb // b, b, wb // b, b))(x), inverse)
        return Reshape((n, c * b * b, hb // b, wb // b))(y)

    return Rearrangement("SpaceToDepth", steps)(x)


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
    """Pad x by ONNX's pads [begin_0, begin_1, ..., end_0, end_1, ...], as NumPy's np.pad:
    mode "constant" (the value), "reflect" (mirrored about the first and last entries, which
    are not repeated; past the other end it mirrors again) or "edge" (the first or last entry
    repeated). The gradient of a copied entry flows back to the entry it copies."""
    if mode == "constant":
        return Pad(pads, constant)(x)
    if mode not in ("reflect", "edge"):
        raise ValueError(f"pad: mode {mode!r}; use 'constant', 'reflect' or 'edge'")
    n, pads = x.ndim(), [int(p) for p in pads]
    if len(pads) != 2 * n or any(p < 0 for p in pads):
        raise ValueError(f"pad: {2 * n} non-negative pads for a {n}-D tensor, not {pads}")
    if any(size == 0 and pads[a] + pads[a + n] for a, size in enumerate(x.shape)):
        raise ValueError(f"pad: {mode} padding of an empty axis of {x.shape}; use 'constant'")
    return Rearrangement("Pad", lambda x: _copy_entries(x, mode, pads))(x)


def _source(mode, j, size):
    """The entry of an axis of `size` that position j (-before <= j < size + after) copies:
    reflect's is periodic, 2 (size - 1) long (NumPy's), edge's the nearest entry."""
    if mode == "edge":
        return min(max(j, 0), size - 1)
    period = 2 * (size - 1)
    j = j % period if period else 0
    return j if j < size else period - j


def _copy_entries(x, mode, pads):
    """x padded axis by axis: the padded axis's entries, each its _source, cut into runs of
    consecutive entries up or down, each run a slice of x, concatenated."""
    n = x.ndim()
    for axis in range(n):
        before, after, size = pads[axis], pads[axis + n], x.shape[axis]
        if not before and not after:
            continue
        src = [_source(mode, j, size) for j in range(-before, size + after)]
        runs, slices, i = [], {}, 0
        while i < len(src):
            step = src[i + 1] - src[i] if i + 1 < len(src) else 1
            step = step if step in (1, -1) else 1
            k = i + 1
            while k < len(src) and src[k] - src[k - 1] == step:
                k += 1
            end = src[k - 1] + step
            key = (src[i], None if end < 0 else end, step)  # an end of -1 would count from the end
            if key not in slices:  # one slice per run of entries, however often it is copied
                slices[key] = slice(x, [key[0]], [key[1]], [axis], [step])
            runs.append(slices[key])
            i = k
        x = cat(runs, axis)
    return x
