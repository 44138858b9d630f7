"""Dense algebra: y = a @ b (Matmul, as numpy.matmul), y = x + b over rows (AddBias)."""

import math

import numpy as np

from nnmem.operation import InputError, Operator
from nnmem.ops.broadcast import reduce_to

__all__ = ["AddBias", "Matmul", "TransposedMatmul", "add_bias", "matmul"]


class Matmul(Operator):
    """y = a @ b as numpy.matmul, for a (..., n, k) and b (..., k, m) of at least 2 dimensions:
    da = dy @ b^T, db = a^T @ dy, matrix by matrix.

    A 2-D b (a Linear layer's weight, a transformer's projection of (batch, seq, k)) is one
    GEMM: a's leading axes are folded into its rows, and db = a^T @ dy sums over them in the
    same GEMM. Otherwise the leading (batch) axes broadcast as NumPy's do ((B, H, S, D) @
    (B, H, D, T), (B, 1, S, D) @ (1, H, D, T)): one GEMM per output matrix, on views of the
    inputs' matrices (nothing is expanded in memory), and the gradient of an input whose batch
    axes were broadcast is summed back over them (broadcast.reduce_to): it costs a temporary of
    the output's batch size times the input's matrix, only for that input."""

    def forward(self, a, b):
        K = self.kernels
        batch = _batch_shape(a, b)
        if a.dtype != b.dtype:
            raise TypeError(f"matmul: dtypes {a.dtype} and {b.dtype} differ; make them equal")
        n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
        y = self.output(batch + (n, m), a.dtype)
        if b.ndim() == 2:
            self.run(lambda y_, a_, b_: K.matmul(y_.reshape(-1, m), a_.reshape(-1, k), b_),
                     reads=(a, b), writes=(y,))  # fmt: skip
        else:
            self.pairs = _pairs(a.shape[:-2], batch), _pairs(b.shape[:-2], batch)
            self.run(_batched(K.matmul, False, False, *self.pairs), reads=(a, b), writes=(y,))
        self.save(a if self.needs_grad[1] else None, b if self.needs_grad[0] else None)
        self.shapes = a.shape, b.shape
        return y

    def backward(self, dy):
        K = self.kernels
        a, b = self.saved
        (a_shape, b_shape), batch = self.shapes, dy.shape[:-2]
        k, m = a_shape[-1], dy.shape[-1]
        da = db = None
        if len(b_shape) == 2:  # one GEMM each, over a's leading axes folded into rows
            if self.needs_grad[0]:
                da = self.output(a_shape, dy.dtype)
                self.run(
                    lambda da_, dy_, b_: K.matmul(
                        da_.reshape(-1, k), dy_.reshape(-1, m), b_, trans_b=True),
                    reads=(dy, b), writes=(da,))  # fmt: skip
            if self.needs_grad[1]:
                db = self.output(b_shape, dy.dtype)
                self.run(
                    lambda db_, a_, dy_: K.matmul(
                        db_, a_.reshape(-1, k), dy_.reshape(-1, m), trans_a=True),
                    reads=(a, dy), writes=(db,))  # fmt: skip
            return da, db
        at_a, at_b, every = *self.pairs, _pairs(batch, batch)
        if self.needs_grad[0]:  # da[i] = dy[i] @ b[j]^T per output matrix, then summed to a
            da = self.output(batch + a_shape[-2:], dy.dtype)
            self.run(_batched(K.matmul, False, True, every, at_b), reads=(dy, b), writes=(da,))
            da = reduce_to(self, da, a_shape)
        if self.needs_grad[1]:  # db[j] = a[i]^T @ dy[i] per output matrix, then summed to b
            db = self.output(batch + b_shape[-2:], dy.dtype)
            self.run(_batched(K.matmul, True, False, at_a, every), reads=(a, dy), writes=(db,))
            db = reduce_to(self, db, b_shape)
        return da, db


class TransposedMatmul(Operator):
    """y = op(a) @ op(b) for 2-D a and b, op the transpose where `trans_a` / `trans_b` say
    (ONNX's and SINGA's Gemm: a fully connected layer stores W as (out, in), transB=1). The
    GEMM reads an operand transposed where it lies, so forward makes no transposed copy, and
    each gradient is written once, in its operand's own layout:

        da = dy op(b)^T, or op(b) dy^T with trans_a;  db = op(a)^T dy, or dy^T op(a) with trans_b
    """

    def __init__(self, trans_a=False, trans_b=False):
        super().__init__("Matmul")  # the same pass as Matmul's (the cost model counts its flops)
        self.trans_a, self.trans_b = bool(trans_a), bool(trans_b)

    def forward(self, a, b):
        ta, tb = self.trans_a, self.trans_b
        if a.ndim() != 2 or b.ndim() != 2:
            raise ValueError(f"gemm: operands {a.shape} and {b.shape}; gemm takes 2-D matrices")
        n, k = a.shape[::-1] if ta else a.shape
        k_b, m = b.shape[::-1] if tb else b.shape
        if k != k_b:
            raise ValueError(
                f"gemm: op(A) of {(n, k)} and op(B) of {(k_b, m)} do not chain "
                f"(transA={int(ta)}, transB={int(tb)})"
            )
        if a.dtype != b.dtype:
            raise TypeError(f"gemm: dtypes {a.dtype} and {b.dtype} differ; make them equal")
        y = self.output((n, m), a.dtype)
        matmul = self.kernels.matmul
        self.run(lambda y_, a_, b_: matmul(y_, a_, b_, trans_a=ta, trans_b=tb),
                 reads=(a, b), writes=(y,))  # fmt: skip
        self.save(a if self.needs_grad[1] else None, b if self.needs_grad[0] else None)
        self.shapes = a.shape, b.shape
        return y

    def backward(self, dy):
        matmul, ta, tb = self.kernels.matmul, self.trans_a, self.trans_b
        a, b = self.saved
        a_shape, b_shape = self.shapes
        da = db = None
        if self.needs_grad[0]:
            da = self.output(a_shape, dy.dtype)
            if ta:  # da = op(b) dy^T
                self.run(lambda da_, b_, dy_: matmul(da_, b_, dy_, trans_a=tb, trans_b=True),
                         reads=(b, dy), writes=(da,))  # fmt: skip
            else:  # da = dy op(b)^T
                self.run(lambda da_, dy_, b_: matmul(da_, dy_, b_, trans_b=not tb),
                         reads=(dy, b), writes=(da,))  # fmt: skip
        if self.needs_grad[1]:
            db = self.output(b_shape, dy.dtype)
            if tb:  # db = dy^T op(a)
                self.run(lambda db_, dy_, a_: matmul(db_, dy_, a_, trans_a=True, trans_b=ta),
                         reads=(dy, a), writes=(db,))  # fmt: skip
            else:  # db = op(a)^T dy
                self.run(lambda db_, a_, dy_: matmul(db_, a_, dy_, trans_a=not ta),
                         reads=(a, dy), writes=(db,))  # fmt: skip
        return da, db


def _batch_shape(a, b):
    """The broadcast batch shape of a @ b, or a ValueError saying why they do not chain."""
    batch = None
    if a.ndim() >= 2 and b.ndim() >= 2 and a.shape[-1] == b.shape[-2]:
        try:
            batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        except ValueError:
            pass
    if batch is None:
        raise ValueError(
            f"matmul: shapes {a.shape} and {b.shape} do not chain; need (n, k) "
            "and (k, m), or batches (..., n, k) and (..., k, m) with the same leading "
            "sizes, or leading sizes that broadcast as in numpy.matmul (a Linear layer's "
            "input must be 2-D: add a Flatten)"
        )
    return batch


def _pairs(shape, batch):
    """For each matrix of a batch of `batch` (row-major order), the index of the matrix of an
    input whose leading axes `shape` broadcast to it."""
    return tuple(np.broadcast_to(np.arange(math.prod(shape)).reshape(shape), batch).ravel())


def _batched(matmul, trans_a, trans_b, at_a, at_b):
    """The kernel call y[i] = op(a[at_a[i]]) @ op(b[at_b[i]]) for each matrix i of y."""

    def run(y_, a_, b_):
        ys = y_.reshape((-1,) + y_.shape[-2:])
        as_, bs = a_.reshape((-1,) + a_.shape[-2:]), b_.reshape((-1,) + b_.shape[-2:])
        for i in range(ys.shape[0]):
            matmul(ys[i], as_[at_a[i]], bs[at_b[i]], trans_a=trans_a, trans_b=trans_b)

    return run


class AddBias(Operator):
    """y[i, :] = x[i, :] + b; db = sum over rows of dy."""

    def forward(self, x, b):
        K = self.kernels
        if x.ndim() != 2 or b.shape != (x.shape[1],):
            raise ValueError(f"add_bias: x {x.shape} and bias {b.shape}; need (n, f) and (f,)")
        y = self.output(x.shape, x.dtype)

        def kernel(y_, x_, b_):
            K.copy(y_.reshape(-1), x_.reshape(-1))
            K.add_bias_rows(y_, b_)

        self.run(kernel, reads=(x, b), writes=(y,), inplace=((y, x),), tag=("add_bias_rows",))
        return y

    def backward(self, dy):
        K = self.kernels
        db = None
        if self.needs_grad[1]:
            db = self.output((dy.shape[1],), dy.dtype)
            self.run(K.sum_rows, reads=(dy,), writes=(db,), tag=("sum_rows",))
        return dy, db


def matmul(a, b):
    return Matmul()(a, b)


def add_bias(x, b, axis=0):
    if axis != 0:
        raise InputError(
            "add_bias: only axis=0 (a bias per column, added to every row) is supported"
        )
    return AddBias()(x, b)
