"""Tensor contractions: SINGA's ``tensor.tensordot`` and ``tensor.einsum``, as NumPy's.

Both are written with the operators nnmem already has, so every step is a device operation
(a recorded step replays it, the plan sees its memory) and the gradient is theirs:

    tensordot(a, b, axes)   a's free axes and b's free axes, summed over the pairs of `axes`:
                            a transposed to (free, summed) and viewed as an (M, K) matrix, b
                            to (summed, free) as (K, N), one matmul, the (M, N) result viewed
                            with the free axes' sizes.
    einsum('kij,kih->kjh', a, b)
                            each letter of the subscripts is an axis; a letter in both inputs
                            but not in the output is summed over (a contraction). The letters
                            fall in four groups, and each input is transposed and viewed as a
                            batch of matrices: a as (batch, a's free, contracted), b as (batch,
                            contracted, b's free); a batched matmul contracts them (a broadcast
                            multiply where nothing is contracted: an outer or elementwise
                            product, with no GEMM of width 1), and the result is viewed with the
                            letters' sizes and transposed to the output's order. A letter of
                            one input alone that the output lacks is summed over first.

SINGA's einsum multiplies every pair of elements before it sums (the repeated inputs and their
product hold batch x all letters' sizes); the matmul holds only the output. A transpose that
leaves the axes in place is skipped (no copy); the views cost no memory.
"""

import math
import numbers
import re

from nnmem.ops import broadcast, reduce, transform
from nnmem.ops.linear import matmul


def tensordot(a, b, axes=2):
    """The sum of a's and b's products over pairs of axes (numpy.tensordot): `axes` an int n
    (a's last n axes with b's first n) or a pair (a's axes, b's axes), each a sequence or an
    int. The result has a's free axes, then b's; a full contraction gives a (1, 1) tensor, as
    SINGA's does (NumPy's is 0-d)."""
    axes_a, axes_b = _axis_pairs(a, b, axes)
    free_a = [i for i in range(a.ndim()) if i not in axes_a]
    free_b = [i for i in range(b.ndim()) if i not in axes_b]
    m, k, n = (
        math.prod(t.shape[i] for i in ax) for t, ax in ((a, free_a), (a, axes_a), (b, free_b))
    )
    a2 = _permuted(a, free_a + axes_a).reshape((m, k))
    b2 = _permuted(b, axes_b + free_b).reshape((k, n))
    shape = tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b)
    return matmul(a2, b2).reshape(shape or (1, 1))


def _axis_pairs(a, b, axes):
    """(a's axes, b's axes) of tensordot's `axes`, as lists of axis numbers >= 0, checked."""
    if isinstance(axes, numbers.Integral):
        if not 0 <= axes <= min(a.ndim(), b.ndim()):
            raise ValueError(
                f"tensordot: axes={axes} for tensors of {a.ndim()} and {b.ndim()} axes; "
                f"give 0 to {min(a.ndim(), b.ndim())}"
            )
        pairs = list(range(a.ndim() - axes, a.ndim())), list(range(axes))
    else:
        try:
            pairs = tuple(
                [int(x)] if isinstance(x, numbers.Integral) else [int(i) for i in x] for x in axes
            )
        except (TypeError, ValueError):
            pairs = ()
        if len(pairs) != 2:
            raise ValueError(
                f"tensordot: axes={axes!r}; give an int or a pair (a's axes, b's axes)"
            ) from None
    for name, t, chosen in (("a", a, pairs[0]), ("b", b, pairs[1])):
        if any(not -t.ndim() <= i < t.ndim() for i in chosen):
            raise ValueError(f"tensordot: axes {chosen} of {name}, which has {t.ndim()} axes")
        chosen[:] = [i % t.ndim() for i in chosen]
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"tensordot: axes {chosen} of {name} name an axis twice")
    sizes_a, sizes_b = ([t.shape[i] for i in p] for t, p in zip((a, b), pairs))
    if sizes_a != sizes_b:
        raise ValueError(
            f"tensordot: a's axes {pairs[0]} have sizes {sizes_a}, b's axes {pairs[1]} "
            f"{sizes_b}; paired axes must have equal sizes"
        )
    return pairs


def einsum(subscripts, *operands):
    """Einstein summation of two tensors, as numpy.einsum: 'ij,jk->ik' is a @ b, 'kij,kij->kij'
    a * b, 'i,j->ij' the outer product. Without '->' the output is the letters that appear
    once, in alphabetical order (NumPy's rule). Each letter is one axis (a letter twice in one
    input, a diagonal, and '...' are not supported); SINGA's einsum takes two operands too."""
    if len(operands) != 2:
        raise ValueError(f"einsum: {len(operands)} operands; SINGA's einsum (and this) takes 2")
    a, b = operands
    (in_a, in_b), out = _parse(subscripts, a, b)
    sizes = _letter_sizes((in_a, a), (in_b, b))
    a, in_a = _summed_alone(a, in_a, out + in_b)
    b, in_b = _summed_alone(b, in_b, out + in_a)
    batch = [c for c in out if c in in_a and c in in_b]
    free_a = [c for c in out if c in in_a and c not in in_b]
    free_b = [c for c in out if c in in_b and c not in in_a]
    summed = [c for c in in_a if c in in_b and c not in out]
    groups_a = ([batch] if batch else []) + [free_a, summed]
    groups_b = ([batch] if batch else []) + [summed, free_b]
    a3, b3 = _grouped(a, in_a, groups_a, sizes), _grouped(b, in_b, groups_b, sizes)
    y = matmul(a3, b3) if summed else broadcast.binary("mul", a3, b3)
    letters = batch + free_a + free_b
    y = y.reshape(tuple(sizes[c] for c in letters))
    return _permuted(y, [letters.index(c) for c in out])


def _parse(subscripts, a, b):
    """((a's letters, b's letters), the output's letters), each a string, checked."""
    text = subscripts.replace(" ", "")
    inputs, arrow, out = text.partition("->")
    letters = inputs.split(",")
    if not arrow:
        out = "".join(sorted(c for c in set(inputs) if c.isalpha() and inputs.count(c) == 1))
    if len(letters) != 2 or not all(re.fullmatch("[A-Za-z]*", s) for s in letters + [out]):
        raise ValueError(
            f"einsum: subscripts {subscripts!r}; give letters for each of two inputs, and "
            "optionally '->' and the output's, e.g. 'ij,jk->ik' ('...' is not supported)"
        )
    for name, s in (("a", letters[0]), ("b", letters[1]), ("the output", out)):
        if len(set(s)) != len(s):
            raise ValueError(
                f"einsum: {s!r} names an axis of {name} twice (a diagonal); not supported"
            )
    for name, s, t in (("a", letters[0], a), ("b", letters[1], b)):
        if len(s) != t.ndim():
            raise ValueError(f"einsum: {s!r} for {name}, which has {t.ndim()} axes {t.shape}")
    if set(out) - set(inputs):
        raise ValueError(f"einsum: output letters {sorted(set(out) - set(inputs))} in no input")
    return tuple(letters), out


def _letter_sizes(*lettered):
    """{letter: size} from (letters, tensor) pairs; a letter must have one size everywhere."""
    sizes = {}
    for letters, t in lettered:
        for c, n in zip(letters, t.shape):
            if sizes.setdefault(c, n) != n:
                raise ValueError(f"einsum: axis {c!r} has sizes {sizes[c]} and {n}")
    return sizes


def _summed_alone(t, letters, kept):
    """(t summed over its axes whose letter is not in `kept`, its remaining letters)."""
    axes = [i for i, c in enumerate(letters) if c not in kept]
    if not axes:
        return t, letters
    return reduce.reduce_sum(t, axes, keepdims=False), "".join(c for c in letters if c in kept)


def _grouped(t, letters, groups, sizes):
    """t transposed so its axes come in the order of `groups` (lists of letters), then viewed
    with one axis per group, of the group's letters' sizes multiplied (1 for an empty one)."""
    order = [letters.index(c) for group in groups for c in group]
    shape = tuple(math.prod(sizes[c] for c in group) for group in groups)
    return _permuted(t, order).reshape(shape)


def _permuted(t, perm):
    """t with its axes in the order `perm`: t itself (no copy) when that is their order."""
    if list(perm) == list(range(t.ndim())):
        return t
    return transform.transpose(t, perm)
