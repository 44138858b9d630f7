"""Operators that move elements without computing: transpose, slicing, squeeze, unsqueeze.

Transpose and slicing copy through the strided kernels (kernels/cpu/strided.py): a transpose
reads x with permuted strides, a slice with an offset and stepped strides. Their gradients run
the same maps back: a transpose by the inverse permutation; a slice scatters dy into a zeroed
dx (every element the slice did not read gets no gradient). Squeeze and unsqueeze only change
the shape: views on the same block, like Reshape.
"""

from nnmem.operation import Operator
from nnmem.ops.arith import Reshape
from nnmem.ops.strides import axis_index, check_rank, contiguous_strides, pad

__all__ = ["Slice", "Transpose", "squeeze", "transpose", "unsqueeze"]


class Transpose(Operator):
    """y = x with its axes permuted: y.shape[i] = x.shape[perm[i]] (perm=None reverses them)."""

    def __init__(self, perm=None):
        super().__init__()
        self.perm = None if perm is None else tuple(int(p) for p in perm)

    def forward(self, x):
        n = x.ndim()
        perm = tuple(reversed(range(n))) if self.perm is None else self.perm
        if any(not -n <= p < n for p in perm) or sorted(p % n for p in perm) != list(range(n)):
            raise ValueError(f"transpose: {perm} is not a permutation of the {n} axes of {x.shape}")
        check_rank("transpose", x.shape)
        self.perm = perm = tuple(p % n for p in perm)
        return _permute(self, x, perm)

    def backward(self, dy):
        inverse = [0] * len(self.perm)
        for i, p in enumerate(self.perm):
            inverse[p] = i
        return _permute(self, dy, inverse)


def _permute(op, x, perm):
    shape = tuple(x.shape[p] for p in perm)
    strides = contiguous_strides(x.shape)
    args = pad(shape, 1), pad([strides[p] for p in perm], 0), 0
    y = op.output(shape, x.dtype)
    kern = op.kernels.strided_gather
    op.run(lambda y_, x_: kern(y_.reshape(-1), x_.reshape(-1), *args), reads=(x,), writes=(y,))
    return y


class Slice(Operator):
    """y = x[key] for a key of ints and slices (any step). As in SINGA, an int keeps its axis
    with size 1 (t[0] of a (3, 4) tensor is (1, 4); squeeze drops it). The gradient is dy in the
    sliced positions, 0 elsewhere."""

    def __init__(self, key):
        super().__init__()
        self.key = key if isinstance(key, tuple) else (key,)

    def forward(self, x):
        check_rank("slice", x.shape)
        if len(self.key) > x.ndim():
            raise IndexError(f"slice: {len(self.key)} indices for a {x.ndim()}-D tensor")
        offset, shape, strides = 0, [], []
        for axis, (size, stride) in enumerate(zip(x.shape, contiguous_strides(x.shape))):
            k = self.key[axis] if axis < len(self.key) else slice(None)
            if isinstance(k, slice):
                start, _, step = k.indices(size)
                offset += start * stride
                shape.append(len(range(*k.indices(size))))
                strides.append(stride * step)
            elif isinstance(k, int) and not isinstance(k, bool):
                if not -size <= k < size:
                    raise IndexError(f"slice: index {k} out of range for axis {axis} of {size}")
                offset += (k % size) * stride
                shape.append(1)
                strides.append(stride)
            else:
                raise TypeError(f"slice: index {k!r}; tensors take ints and slices")
        y = self.output(tuple(shape), x.dtype)
        self.args, self.x_shape = (pad(shape, 1), pad(strides, 0), offset), x.shape
        kern, args = self.kernels.strided_gather, self.args
        self.run(
            lambda y_, x_: kern(y_.reshape(-1), x_.reshape(-1), *args), reads=(x,), writes=(y,)
        )
        return y

    def backward(self, dy):
        dx = self.output(self.x_shape, dy.dtype)
        K, args = self.kernels, self.args

        def kernel(dx_, dy_):
            K.fill(dx_.reshape(-1), 0.0)
            K.strided_scatter(dx_.reshape(-1), dy_.reshape(-1), *args)

        self.run(kernel, reads=(dy,), writes=(dx,))
        return dx


def transpose(x, shape=None):
    """SINGA's name: `shape` is the permutation of the axes."""
    return Transpose(shape)(x)


def squeeze(x, axis=None):
    """x without the size-1 axes listed in `axis` (all size-1 axes by default): a view."""
    axes = [] if axis is None else [axis] if isinstance(axis, int) else list(axis)
    n = x.ndim()
    if axes:
        axes = {axis_index("squeeze", a, n) for a in axes}
    else:
        axes = {i for i, s in enumerate(x.shape) if s == 1}
    if any(x.shape[a] != 1 for a in axes):
        raise ValueError(f"squeeze: axes {sorted(axes)} of {x.shape} are not all of size 1")
    return Reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))(x)


def unsqueeze(x, axis=-1):
    """x with new size-1 axes at the positions `axis` (an int or a list) of the result: a view."""
    axes = [axis] if isinstance(axis, int) else list(axis)
    n = x.ndim() + len(axes)
    positions = sorted(axis_index("unsqueeze", a, n) for a in axes)
    shape = list(x.shape)
    for p in positions:
        shape.insert(p, 1)
    return Reshape(tuple(shape))(x)
