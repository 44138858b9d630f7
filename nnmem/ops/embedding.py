"""Embedding: y[..., :] = W[ids[...], :], a row of the table W (V, F) per integer id.

The ids (int32, any shape) get no gradient; W's gradient sums dy's rows by id
(kernels/cpu/embedding.py: deterministic, no atomics). Memory: backward keeps only the ids,
not the looked-up rows, and the gradient is a full (V, F) table, as dense as W itself.
"""

from nnmem.operation import Operator

__all__ = ["Embedding", "embedding"]


class Embedding(Operator):
    def forward(self, ids, W):
        if ids.dtype.kind != "i" or ids.dtype.itemsize != 4:
            raise TypeError(
                f"embedding: ids of dtype {ids.dtype}; they must be int32 (t.as_type(tensor.int32))"
            )
        if W.ndim() != 2:
            raise ValueError(f"embedding: the table must be 2-D (rows, features), not {W.shape}")
        n, f = ids.size(), W.shape[1]
        y = self.output(ids.shape + (f,), W.dtype)
        fwd = self.kernels.embedding_forward
        self.run(
            lambda y_, ids_, w_: fwd(y_.reshape(n, f), ids_.reshape(-1), w_),
            reads=(ids, W),
            writes=(y,),
        )
        self.save(ids)
        self.table_shape = W.shape
        return y

    def backward(self, dy):
        (ids,) = self.saved
        dW = self.output(self.table_shape, dy.dtype)
        n, f = ids.size(), self.table_shape[1]
        bwd = self.kernels.embedding_backward
        self.run(
            lambda dw_, dy_, ids_: bwd(dw_, dy_.reshape(n, f), ids_.reshape(-1)),
            reads=(dy, ids),
            writes=(dW,),
        )
        return None, dW


def embedding(x, w):
    """SINGA's autograd.embedding(ids, table)."""
    return Embedding()(x, w)
