"""Dense algebra: y = x @ W (Matmul) and y = x + b broadcast over rows (AddBias)."""

from nnmem.operation import Operator

__all__ = ["AddBias", "Matmul", "add_bias", "matmul"]


class Matmul(Operator):
    """y = a @ b for 2-D a (n, k) and b (k, m); da = dy @ b^T, db = a^T @ dy. Batched, as
    SINGA's: a (..., n, k) and b (..., k, m) with equal leading dimensions multiply matrix by
    matrix (one GEMM per matrix, on views of the contiguous blocks)."""

    def forward(self, a, b):
        K = self.kernels
        batch = a.shape[:-2]
        if (
            a.ndim() < 2
            or a.ndim() != b.ndim()
            or b.shape[:-2] != batch
            or a.shape[-1] != b.shape[-2]
        ):
            raise ValueError(
                f"matmul: shapes {a.shape} and {b.shape} do not chain; need (n, k) "
                "and (k, m), or batches (..., n, k) and (..., k, m) with the same leading "
                "sizes (a Linear layer's input must be 2-D: add a Flatten)"
            )
        if a.dtype != b.dtype:
            raise TypeError(f"matmul: dtypes {a.dtype} and {b.dtype} differ; make them equal")
        y = self.output(batch + (a.shape[-2], b.shape[-1]), a.dtype)
        self.run(_batched(K.matmul, 0, 0), reads=(a, b), writes=(y,))
        self.save(a if self.needs_grad[1] else None, b if self.needs_grad[0] else None)
        return y

    def backward(self, dy):
        K = self.kernels
        a, b = self.saved
        da = db = None
        if self.needs_grad[0]:
            da = self.output(dy.shape[:-1] + (b.shape[-2],), dy.dtype)
            self.run(_batched(K.matmul, False, True), reads=(dy, b), writes=(da,))
        if self.needs_grad[1]:
            db = self.output(a.shape[:-2] + (a.shape[-1], dy.shape[-1]), dy.dtype)
            self.run(_batched(K.matmul, True, False), reads=(a, dy), writes=(db,))
        return da, db


def _batched(matmul, trans_a, trans_b):
    """The kernel call y = op(a) @ op(b) for 2-D arrays, or for each matrix of a batch."""

    def run(y_, a_, b_):
        if y_.ndim == 2:
            matmul(y_, a_, b_, trans_a=bool(trans_a), trans_b=bool(trans_b))
            return
        ys = y_.reshape((-1,) + y_.shape[-2:])
        as_, bs = a_.reshape((-1,) + a_.shape[-2:]), b_.reshape((-1,) + b_.shape[-2:])
        for i in range(ys.shape[0]):
            matmul(ys[i], as_[i], bs[i], trans_a=bool(trans_a), trans_b=bool(trans_b))

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

        self.run(kernel, reads=(x, b), writes=(y,), inplace=((y, x),))
        return y

    def backward(self, dy):
        K = self.kernels
        db = None
        if self.needs_grad[1]:
            db = self.output((dy.shape[1],), dy.dtype)
            self.run(K.sum_rows, reads=(dy,), writes=(db,))
        return dy, db


def matmul(a, b):
    return Matmul()(a, b)


def add_bias(x, b, axis=0):
    if axis != 0:
        raise ValueError(
            "add_bias: only axis=0 (a bias per column, added to every row) is supported"
        )
    return AddBias()(x, b)
