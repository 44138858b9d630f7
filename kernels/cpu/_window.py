"""Index arithmetic shared by the sliding-window kernels (convolution and pooling).

A window kernel maps output position ``i`` and kernel offset ``p`` (the tap's index times
the dilation) to the input row ``i*stride + p - pad``. Rather than testing every position
against the padding, the kernels ask once per offset which output positions land inside
the input, and loop only over that range: the padded border costs nothing.
"""

from ._jit import njit

__all__ = ["valid_range", "output_size"]


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


def _output_size(size, extent, stride, pad, pad_end, ceil_mode):
    """Outputs of a window of `extent` rows (dilation*(k-1)+1) over `size` rows padded by `pad`
    before and `pad_end` after: kernels/sizes.py's window_output_size, for the kernels' checks
    (floor; with ceil_mode the ceiling, less one where the last window would start past the
    input and the padding before it). Pure integer maths; -1 where the window does not fit."""
    span = size + pad + pad_end - extent
    if span < 0:
        return -1
    if not ceil_mode:
        return span // stride + 1
    out = (span + stride - 1) // stride + 1
    if (out - 1) * stride >= size + pad:
        out -= 1
    return out


output_size = njit(cache=True)(_output_size)
