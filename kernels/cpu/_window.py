"""Index arithmetic shared by the sliding-window kernels (convolution and pooling).

A window kernel maps output position ``i`` and kernel offset ``p`` to the input
row ``i*stride + p - pad``. Rather than testing every position against the
padding, the kernels ask once per offset which output positions land inside
the input, and loop only over that range: the padded border costs nothing.
"""

from ._jit import njit

__all__ = ["valid_range"]


def _valid_range(out_size, offset, stride, pad, in_size):
    """Half-open [lo, hi) of outputs i with 0 <= i*stride + offset - pad < in_size.
    Pure integer maths."""
    # lowest i with i*stride >= pad - offset (ceil division; may be negative -> clamp at 0)
    lo = (pad - offset + stride - 1) // stride
    if lo < 0:
        lo = 0
    # highest i with i*stride <= in_size - 1 + pad - offset, plus one
    top = in_size - 1 + pad - offset
    if top < 0:
        hi = 0
    else:
        hi = top // stride + 1
    if hi > out_size:
        hi = out_size
    if hi < lo:
        hi = lo
    return lo, hi


valid_range = njit(cache=True)(_valid_range)
