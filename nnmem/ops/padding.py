"""Padding and sizes as SINGA and ONNX give them: one int or a pair, two sides or four, and the
"same" padding that ONNX's auto_pad asks for. Shared by convolution (conv.py), pooling
(pooling.py), the layers and the ONNX converters."""

import numpy as np

#: SINGA's and ONNX's padding modes (auto_pad): the padding given, none, or "same" padding.
PAD_MODES = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def auto_pads(pad_mode, size, kernel, stride, dilation=(1, 1)):
    """(top, left, bottom, right) for `pad_mode` "VALID" (none) or "SAME_*" on an input of
    spatial `size`: out = ceil(n / s) per axis, the input padded by max((out - 1) s + d (k - 1)
    + 1 - n, 0), half before, half after, the odd one after (SAME_UPPER) or before (_LOWER)."""
    if pad_mode not in PAD_MODES[1:]:
        raise ValueError(f"pad_mode {pad_mode!r}; use VALID, SAME_UPPER or SAME_LOWER")
    begin, end = [], []
    for n, k, s, d in zip(size, kernel, stride, dilation):
        total = 0 if pad_mode == "VALID" else max((-(-n // s) - 1) * s + d * (k - 1) + 1 - n, 0)
        after = total - total // 2 if pad_mode == "SAME_UPPER" else total // 2
        begin.append(total - after)
        end.append(after)
    return tuple(begin + end)


def pair(v):
    """(v, v) for one int, else the values given: SINGA's kernel/stride/padding sizes."""
    return (v, v) if isinstance(v, int) else tuple(v)


def four_sides(padding, name):
    """(top, left, bottom, right) of a padding given as (ph, pw), the same on both sides, or as
    (top, left, bottom, right), ONNX's order for pads [x1_begin, x2_begin, x1_end, x2_end]."""
    pads = tuple(padding)
    if len(pads) not in (2, 4) or not all(whole(p, 0) for p in pads):
        raise ValueError(
            f"{name}: padding {padding!r}; give (ph, pw) or (top, left, bottom, right), "
            "whole numbers >= 0"
        )
    pads = tuple(int(p) for p in pads)
    return pads * 2 if len(pads) == 2 else pads


def whole(v, least):
    """Is v a whole number (a Python or NumPy int) >= least?"""
    return isinstance(v, (int, np.integer)) and v >= least
