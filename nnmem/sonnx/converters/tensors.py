"""Converters of the operators that move data without arithmetic: Reshape, Flatten,
Transpose, Concat, Split, Slice, Squeeze, Unsqueeze, Expand, Tile, Gather, Pad, the
reductions, and the host-only operators (Shape, ConstantOfShape, Range, ...), whose results
are shapes or constants computed before the step.

Shapes, axes and pads arrive as NumPy arrays (the registrations' `static` inputs): a static
plan must know every tensor's shape before the step runs.
"""

import math

import numpy as np

from nnmem import autograd
from nnmem.ops.rearrange import Pad
from nnmem.sonnx.converters import converts


@converts("Reshape", attributes=("allowzero", "shape"), static=(1,))
def reshape(call, x, shape=None):
    """Reshape: 0 copies the input's dimension (unless allowzero), -1 is inferred.

    A model exported at a fixed batch B (ONNX's model zoo: B = 1) writes B into its
    flattening Reshape, (1, 2048). Run at another batch b, a target whose first size is B
    while the input's first size is b, and which cannot hold the input's elements, keeps the
    batch: (b, 2048). That is what the exporter meant, and what lets nnmem plan a zoo model at
    batch 32. A target that holds them is taken as written (a shape computed by Shape)."""
    shape = [int(s) for s in (call.attr("shape") if shape is None else shape)]
    if not call.attr("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    batch = call.rep.graph.batch
    if (
        batch is not None
        and shape
        and shape[0] == batch
        and x.ndim()
        and x.shape[0] != batch
        and not _holds(shape, x.size())
    ):
        shape[0] = x.shape[0]
    return autograd.reshape(x, tuple(shape))


def _holds(shape, size):
    """True if a reshape to `shape` (-1: inferred) can hold `size` elements."""
    fixed = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        return fixed > 0 and size % fixed == 0
    return fixed == size


@converts("Flatten", attributes=("axis",))
def flatten(call, x):
    """(d0, ..., dn) -> (d0 * ... * d(axis-1), d(axis) * ... * dn); axis in [-n-1, n+1)."""
    axis = call.attr("axis", 1)
    axis = axis + x.ndim() if axis < 0 else axis
    if axis == 0:  # every dimension in the second: (1, size)
        return autograd.reshape(x, (1, x.size()))
    return autograd.flatten(x, axis)


@converts("Transpose", attributes=("perm",))
def transpose(call, x):
    perm = call.attr("perm", list(range(x.ndim()))[::-1])
    return autograd.transpose(x, tuple(perm))


@converts("Concat", attributes=("axis",))
def concat(call, *xs):
    return autograd.cat(list(xs), call.attr("axis"))


@converts("Split", attributes=("axis", "split", "num_outputs"), static=(1,))
def split(call, x, parts=None):
    axis = call.attr("axis", 0)
    parts = call.attr("split") if parts is None else [int(p) for p in parts]
    count = call.attr("num_outputs", len(call.node.outputs))
    if parts is None and x.shape[axis] % count:  # opset 18: the last piece is smaller
        size = -(-x.shape[axis] // count)
        parts = [size] * (count - 1) + [x.shape[axis] - size * (count - 1)]
    return autograd.split(x, axis, parts, count)


@converts("Slice", attributes=("starts", "ends", "axes"), static=(1, 2, 3, 4))
def slice_(call, x, starts=None, ends=None, axes=None, steps=None):
    """Slice (attributes before opset 10, inputs since), ends clamped as ONNX says."""
    if starts is None:
        starts, ends, axes = call.attr("starts"), call.attr("ends"), call.attr("axes")
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    big = 2**62  # ONNX writes INT64_MAX for "to the end"; Python's slices clamp any int
    clamp = [int(max(min(int(v), big), -big)) for v in ends]
    return autograd.slice(x, [int(s) for s in starts], clamp, axes, steps)


@converts("Squeeze", "Unsqueeze", attributes=("axes",), static=(1,))
def squeeze(call, x, axes=None):
    axes = call.attr("axes") if axes is None else [int(a) for a in axes]
    if call.node.op_type == "Unsqueeze":
        return autograd.unsqueeze(x, list(axes))
    return autograd.squeeze(x, None if axes is None else list(axes))


@converts("Expand", static=(1,))
def expand(call, x, shape):
    shape = np.broadcast_shapes(x.shape, tuple(int(s) for s in shape))
    return x if shape == x.shape else autograd.expand(x, shape)


@converts("Tile", static=(1,))
def tile(call, x, repeats):
    return autograd.tile(x, [int(r) for r in repeats])


@converts("Gather", attributes=("axis",))
def gather(call, x, indices):
    """Gather along `axis`: rows of an embedding table looked up by a tensor of ids, or
    entries picked by indices known before the step."""
    axis = call.attr("axis", 0)
    if isinstance(indices, np.ndarray):
        picked = autograd.gather(x, axis, np.atleast_1d(indices).tolist())
        return autograd.squeeze(picked, axis) if indices.ndim == 0 else picked
    if axis != 0 or x.ndim() != 2:
        raise call.fail("a gather by ids computed in the step reads rows of a 2-D table only")
    return autograd.embedding(indices, x)


@converts("Pad", attributes=("mode", "pads", "value"), static=(1, 2, 3))
def pad(call, x, pads=None, value=None, axes=None):
    """Pad with a constant (modes reflect, edge and wrap are refused: nnmem's pad has none)."""
    mode = call.attr("mode", "constant")
    if mode != "constant":
        raise call.fail(f"mode {mode!r} is not supported; nnmem pads with a constant only")
    pads = call.attr("pads") if pads is None else [int(p) for p in pads]
    if axes is not None:
        full = [0] * (2 * x.ndim())
        for i, a in enumerate(int(a) % x.ndim() for a in axes):
            full[a], full[a + x.ndim()] = pads[i], pads[i + len(axes)]
        pads = full
    constant = float(value) if value is not None and np.size(value) else call.attr("value", 0.0)
    return Pad(tuple(pads), constant)(x)


#: The reductions made of a sum: (what is summed, what is done to the sum).
REDUCTIONS = {
    "ReduceSum": (None, None), "ReduceSumSquare": (autograd.square, None),
    "ReduceL1": (autograd.abs, None), "ReduceL2": (autograd.square, autograd.sqrt),
    "ReduceLogSum": (None, autograd.log),
}  # fmt: skip


@converts("ReduceMean", *REDUCTIONS, attributes=("axes", "keepdims", "noop_with_empty_axes"),
          static=(1,))  # fmt: skip
def reduce(call, x, axes=None):
    """The mean, or a function of the sum of a function of x (REDUCTIONS), over `axes`
    (all when none are given; none with noop_with_empty_axes)."""
    axes = call.attr("axes") if axes is None else [int(a) for a in axes]
    if axes is not None and not len(axes) and call.attr("noop_with_empty_axes", 0):
        return x
    axes = None if axes is None or not len(axes) else tuple(axes)
    keepdims = bool(call.attr("keepdims", 1))
    if call.node.op_type == "ReduceMean":
        return autograd.reduce_mean(x, axes, keepdims=keepdims)
    before, after = REDUCTIONS[call.node.op_type]
    total = autograd.reduce_sum(before(x) if before else x, axes, keepdims=keepdims)
    return after(total) if after else total


@converts("Shape", attributes=("start", "end"))
def shape(call, x):
    """The shape of a tensor, as a host array: known before the step."""
    return np.array(x.shape[call.attr("start", 0) : call.attr("end")], dtype=np.int64)


@converts("Size")
def size(call, x):
    return np.array(x.size(), dtype=np.int64)


#: Operators whose inputs are shapes, ids or constants: they run on the host only (folded at
#: import, or computed from shapes while the step is recorded), never on a device tensor.
HOST_ONLY = (
    "ConstantOfShape", "Range", "NonZero", "OneHot",
    "ScatterND", "CumSum", "ReduceProd", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin",
)  # fmt: skip


def _host_only(call, *inputs):
    raise call.fail(
        "its inputs must be known before the step (constants or shapes), not device tensors"
    )


for _op in HOST_ONLY:
    converts(_op, attributes=("value", "axis", "keepdims", "exclusive", "reverse",
                              "select_last_index", "reduction", "axes"))(_host_only)  # fmt: skip
