"""Vector registers in Numba: a 64-byte vector type and the four operations a register-tiled
kernel needs (load, store, zero, multiply-add).

Why. LLVM vectorises a loop's innermost level on its own, so a kernel written with loops keeps
its sums in memory: each multiply-add of conv3x3's old loop loaded a partial sum and stored it
back, and the loads and stores, not the arithmetic, set its speed (31-44% of the machine's
peak). A register-tiled kernel keeps a tile of sums (say 2 vectors of pixels x 8 output
channels) in vector registers while it runs over the whole reduction, and touches memory once
per tile. Numba has no type for a vector register, so this module adds one: ``Vector(dtype)``,
whose LLVM type is ``<lanes x float>``: VECTOR_BYTES bytes, one AVX-512 register (16 float32,
8 float64) where the CPU has them, one AVX2 register otherwise. A kernel holds its tile in
local variables of this type, and LLVM keeps local vectors in registers.

The operations, callable from kernels compiled with ``njit``:

- ``vload(a, i)``: the ``lanes`` elements ``a.flat[i : i + lanes]`` of a C-contiguous array;
- ``vstore(a, i, v)``: writes them;
- ``vzero(a)``: a vector of zeros of ``a``'s dtype;
- ``vfma(acc, s, v)``: ``acc + s * v`` with one rounding per lane (``llvm.fma``), ``s`` a
  vector or a scalar of the same dtype (broadcast to every lane);
- ``vadd(u, v)``, ``vmul(u, v)``: lane by lane, ``v`` a vector or a scalar;
- ``vsplat(s)``: a scalar in every lane;
- ``vkeep(v, bits)``: lane l of ``v`` where bit l of the integer ``bits`` is set, +0 elsewhere
  (a select, not ``v * 0``, which would make an infinity or a NaN NaN: the masked lanes read
  exactly the zeros of a padding);
- ``vwload(a, i)``: ``lanes(float64)`` elements from ``a.flat[i]``, widened to float64 (the
  sums of the float32 BatchNorm kernels are float64);
- ``vsum(v)``: the sum of the lanes, in a fixed tree (the upper half added onto the lower
  half, until one lane is left);
- ``vtranspose(dst, d, dst_step, src, s, src_step)``: a square block of ``lanes`` x ``lanes``
  elements transposed: row r of dst (its ``lanes`` elements from ``d + r*dst_step``) gets
  column r of the block whose row k is src's ``lanes`` elements from ``s + k*src_step``; in
  registers (``lanes`` vector loads, log2(lanes) rounds of two-vector shuffles, ``lanes``
  vector stores), where a loop of scalar copies moves one element a cycle.

No bounds are checked, as in any kernel here that uses unsigned indices: the caller makes sure
``i + lanes`` stays within the array.

Bits: where each lane keeps a sum of its own (the convolutions' register tiles), a lane's sum
is the same chain of fused multiply-adds whatever the vector width: the same numbers on every
x86 CPU. Where the lanes are added together (vsum: BatchNorm's sums), the tree follows the
width, so an AVX2 machine and an AVX-512 one differ in the last bits. With ``NUMBA_DISABLE_JIT=1``
(kernels run as Python, for debugging) the operations are NumPy arrays of ``lanes`` elements,
and ``vfma`` computes in float64 and rounds once (a float32 product is exact in float64, so
only the rare double rounding of the sum can differ from the compiled fma; float64 inputs round
twice: debugging only).
"""

import numpy as np
from llvmlite import binding, ir
from numba import types
from numba.core import cgutils, config
from numba.core.datamodel import models, register_default
from numba.core.extending import intrinsic, overload

__all__ = [
    "VECTOR_BYTES", "lanes", "vload", "vstore", "vzero", "vfma",
    "vwload", "vsplat", "vadd", "vmul", "vsum", "vkeep", "vtranspose",
]  # fmt: skip


def _vector_bytes():
    """64 (one AVX-512 register) where Numba compiles for a CPU with AVX-512, else 32 (one AVX2
    register, or two SSE ones): a vector too wide for the registers, split by LLVM into halves,
    would need twice the registers a tile has, and its sums would spill to memory."""
    if config.CPU_NAME:  # NUMBA_CPU_NAME and NUMBA_CPU_FEATURES name the target
        features = config.CPU_FEATURES or ""
    else:
        features = binding.get_host_cpu_features().flatten()
    return 64 if "+avx512f" in features.split(",") else 32


#: Bytes of one vector: 16 float32 or 8 float64 with AVX-512, half as many without.
VECTOR_BYTES = _vector_bytes()


def lanes(dtype):
    """Elements of `dtype` in one vector: VECTOR_BYTES // itemsize."""
    return VECTOR_BYTES // np.dtype(dtype).itemsize


class Vector(types.Type):
    """Numba's type of a vector register holding `lanes(dtype)` elements of a float dtype."""

    def __init__(self, dtype):
        self.dtype = dtype  # a Numba scalar type: float32 or float64
        self.count = lanes(np.dtype(str(dtype)))
        super().__init__(name=f"Vector({dtype} x {self.count})")


@register_default(Vector)
class _VectorModel(models.PrimitiveModel):
    """A Vector is one LLVM value of vector type, as a float is one of float type."""

    def __init__(self, dmm, fe_type):
        element = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(element, fe_type.count))


def _element_pointer(context, builder, array_type, array, index):
    """LLVM pointer to the vector at flat element `index` of a C-contiguous array."""
    data = context.make_array(array_type)(context, builder, array).data
    vector = context.get_value_type(Vector(array_type.dtype))
    return builder.bitcast(builder.gep(data, [index]), vector.as_pointer())


def _splat(builder, value, vtype):
    """`value` in every lane of an LLVM vector of type vtype (a vector is returned as it is)."""
    if value.type == vtype:
        return value
    undef = ir.Constant(vtype, ir.Undefined)
    first = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vtype.count), None)
    return builder.shuffle_vector(first, undef, zeros)


def _float_array(a):
    return isinstance(a, types.Array) and a.dtype in (types.float32, types.float64)


@intrinsic
def _vload(typingctx, a, i):
    if not (_float_array(a) and isinstance(i, types.Integer)):
        return None
    sig = Vector(a.dtype)(a, i)

    def codegen(context, builder, signature, args):
        pointer = _element_pointer(context, builder, signature.args[0], *args)
        return builder.load(pointer, align=a.dtype.bitwidth // 8)  # element alignment only

    return sig, codegen


@intrinsic
def _vstore(typingctx, a, i, v):
    if not (_float_array(a) and isinstance(i, types.Integer) and v == Vector(a.dtype)):
        return None
    sig = types.void(a, i, v)

    def codegen(context, builder, signature, args):
        pointer = _element_pointer(context, builder, signature.args[0], args[0], args[1])
        builder.store(args[2], pointer, align=a.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _vzero(typingctx, a):
    if not _float_array(a):
        return None
    sig = Vector(a.dtype)(a)

    def codegen(context, builder, signature, args):
        return ir.Constant(context.get_value_type(signature.return_type), None)  # all zeros

    return sig, codegen


@intrinsic
def _vfma(typingctx, acc, s, v):
    if not (isinstance(acc, Vector) and v == acc and s in (acc, acc.dtype)):
        return None
    sig = acc(acc, s, v)

    def codegen(context, builder, signature, args):
        total, factor, vector = args
        vtype = vector.type
        broadcast = _splat(builder, factor, vtype)
        suffix = f"v{vtype.count}f{acc.dtype.bitwidth}"
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vtype, [vtype] * 3), f"llvm.fma.{suffix}"
        )
        return builder.call(fma, [broadcast, vector, total])

    return sig, codegen


# The Python forms (NUMBA_DISABLE_JIT=1) and, through overload, the compiled ones.
def vload(a, i):
    # lanes past the end of the array are zeros here, whatever lies there in memory: the
    # compiled kernels read them (a short plane's vector) and never use them
    out = np.zeros(lanes(a.dtype), a.dtype)
    part = a.reshape(-1)[i : i + out.size]
    out[: part.size] = part
    return out


def vstore(a, i, v):
    a.reshape(-1)[i : i + v.size] = v


def vzero(a):
    return np.zeros(lanes(a.dtype), a.dtype)


def vfma(acc, s, v):
    exact = np.asarray(s, np.float64) * v.astype(np.float64) + acc.astype(np.float64)
    return exact.astype(acc.dtype)


@overload(vload, inline="always")
def _vload_overload(a, i):
    return lambda a, i: _vload(a, i)


@overload(vstore, inline="always")
def _vstore_overload(a, i, v):
    return lambda a, i, v: _vstore(a, i, v)


@overload(vzero, inline="always")
def _vzero_overload(a):
    return lambda a: _vzero(a)


@overload(vfma, inline="always")
def _vfma_overload(acc, s, v):
    return lambda acc, s, v: _vfma(acc, s, v)


@intrinsic
def _vwload(typingctx, a, i):
    if not (_float_array(a) and isinstance(i, types.Integer)):
        return None
    sig = Vector(types.float64)(a, i)

    def codegen(context, builder, signature, args):
        wide = context.get_value_type(signature.return_type)
        narrow = ir.VectorType(context.get_value_type(a.dtype), wide.count)
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        pointer = builder.bitcast(builder.gep(data, [args[1]]), narrow.as_pointer())
        loaded = builder.load(pointer, align=a.dtype.bitwidth // 8)
        return loaded if narrow == wide else builder.fpext(loaded, wide)

    return sig, codegen


@intrinsic
def _vsplat(typingctx, s):
    if s not in (types.float32, types.float64):
        return None
    sig = Vector(s)(s)

    def codegen(context, builder, signature, args):
        return _splat(builder, args[0], context.get_value_type(signature.return_type))

    return sig, codegen


def _binary(name):
    """An intrinsic for the LLVM instruction `name` ("fadd", "fmul") of two vectors, or of a
    vector and a scalar of its dtype (the scalar in every lane)."""

    @intrinsic
    def operation(typingctx, u, v):
        if not (isinstance(u, Vector) and v in (u, u.dtype)):
            return None
        sig = u(u, v)

        def codegen(context, builder, signature, args):
            left, right = args
            return getattr(builder, name)(left, _splat(builder, right, left.type))

        return sig, codegen

    return operation


_vadd, _vmul = _binary("fadd"), _binary("fmul")


@intrinsic
def _vsum(typingctx, v):
    if not isinstance(v, Vector):
        return None
    sig = v.dtype(v)

    def codegen(context, builder, signature, args):
        (total,) = args
        count = total.type.count
        while count > 1:  # the upper half added onto the lower half, until one lane is left
            half = count // 2
            index = ir.VectorType(ir.IntType(32), half)
            low = builder.shuffle_vector(total, total, ir.Constant(index, list(range(half))))
            upper = list(range(half, count))
            high = builder.shuffle_vector(total, total, ir.Constant(index, upper))
            total = builder.fadd(low, high)
            count = half
        return builder.extract_element(total, ir.Constant(ir.IntType(32), 0))

    return sig, codegen


@intrinsic
def _vkeep(typingctx, v, bits):
    if not (isinstance(v, Vector) and isinstance(bits, types.Integer)):
        return None
    sig = v(v, bits)

    def codegen(context, builder, signature, args):
        vector, mask = args
        count = vector.type.count
        # the low `count` bits of the integer, one i1 a lane: LLVM's bitcast of an iN to
        # <N x i1> puts bit l in lane l
        width = ir.IntType(count)
        if mask.type.width > count:
            low = builder.trunc(mask, width)
        elif mask.type.width < count:
            low = builder.zext(mask, width)
        else:
            low = mask
        flags = builder.bitcast(low, ir.VectorType(ir.IntType(1), count))
        return builder.select(flags, vector, ir.Constant(vector.type, None))

    return sig, codegen


def _transposed(builder, rows):
    """The columns of a square block of LLVM vectors `rows`. Element (row, lane) must go to
    (lane, row): each round swaps one bit of the two indices, k = 1, 2, 4, ... (the bit of
    value k), by one two-vector shuffle for each row of a pair (r, r + k); after log2(lanes)
    rounds every bit of the row index and the lane index has swapped."""
    count = len(rows)
    mask = ir.VectorType(ir.IntType(32), count)
    k = 1
    while k < count:
        new = list(rows)
        for r in range(count):
            if r & k:
                continue
            # lane l of the pair (r, r + k) after the swap: from row r where bit k of l is
            # clear, else from row r + k (shuffle indices of the second vector start at count)
            low = [lane if not lane & k else count + (lane ^ k) for lane in range(count)]
            high = [lane ^ k if not lane & k else count + lane for lane in range(count)]
            new[r] = builder.shuffle_vector(rows[r], rows[r + k], ir.Constant(mask, low))
            new[r + k] = builder.shuffle_vector(rows[r], rows[r + k], ir.Constant(mask, high))
        rows, k = new, 2 * k
    return rows


@intrinsic
def _vtranspose(typingctx, dst, d, dst_step, src, s, src_step):
    steps = (d, dst_step, s, src_step)
    same = _float_array(src) and src.dtype == dst.dtype  # src may be read-only, dst not
    if not (_float_array(dst) and same and all(isinstance(t, types.Integer) for t in steps)):
        return None
    sig = types.void(dst, d, dst_step, src, s, src_step)

    def codegen(context, builder, signature, args):
        dst_arr, _, _, src_arr, _, _ = args
        d_at, d_step, s_at, s_step = (
            context.cast(builder, args[i], signature.args[i], types.intp) for i in (1, 2, 4, 5)
        )
        dst_type, src_type = signature.args[0], signature.args[3]
        count = Vector(dst_type.dtype).count
        align = dst_type.dtype.bitwidth // 8
        index = d_at.type

        def row(array_type, array, at, step, r):
            offset = builder.add(at, builder.mul(step, ir.Constant(index, r)))
            return _element_pointer(context, builder, array_type, array, offset)

        rows = [
            builder.load(row(src_type, src_arr, s_at, s_step, r), align=align) for r in range(count)
        ]
        for r, column in enumerate(_transposed(builder, rows)):
            builder.store(column, row(dst_type, dst_arr, d_at, d_step, r), align=align)
        return context.get_dummy_value()

    return sig, codegen


def vwload(a, i):
    return a.reshape(-1)[i : i + lanes(np.float64)].astype(np.float64)  # within a row: full


def vsplat(s):
    return np.full(lanes(type(s)), s)


def vadd(u, v):
    return u + v


def vmul(u, v):
    return u * v


def vkeep(v, bits):
    kept = (int(bits) >> np.arange(v.size)) & 1
    return np.where(kept == 1, v, np.zeros_like(v))


def vtranspose(dst, d, dst_step, src, s, src_step):
    n = lanes(dst.dtype)
    block = np.stack([src.reshape(-1)[s + k * src_step : s + k * src_step + n] for k in range(n)])
    for r in range(n):
        dst.reshape(-1)[d + r * dst_step : d + r * dst_step + n] = block[:, r]


def vsum(v):
    while v.size > 1:
        v = v[: v.size // 2] + v[v.size // 2 :]
    return v[0]


@overload(vwload, inline="always")
def _vwload_overload(a, i):
    return lambda a, i: _vwload(a, i)


@overload(vsplat, inline="always")
def _vsplat_overload(s):
    return lambda s: _vsplat(s)


@overload(vadd, inline="always")
def _vadd_overload(u, v):
    return lambda u, v: _vadd(u, v)


@overload(vmul, inline="always")
def _vmul_overload(u, v):
    return lambda u, v: _vmul(u, v)


@overload(vkeep, inline="always")
def _vkeep_overload(v, bits):
    return lambda v, bits: _vkeep(v, bits)


@overload(vtranspose, inline="always")
def _vtranspose_overload(dst, d, dst_step, src, s, src_step):
    return lambda dst, d, dst_step, src, s, src_step: _vtranspose(
        dst, d, dst_step, src, s, src_step
    )


@overload(vsum, inline="always")
def _vsum_overload(v):
    return lambda v: _vsum(v)
