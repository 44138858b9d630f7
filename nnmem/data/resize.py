"""Bilinear image resizing in NumPy (pixel-centre convention, no antialiasing)."""

from __future__ import annotations

import numpy as np

__all__ = ["resize_bilinear"]


def _axis_weights(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output position along one axis:
    (lower source index, upper source index, weight of upper).

    align_corners=False: output pixel ``o`` has its centre at source coordinate
    ``(o + 0.5) * n_in / n_out - 0.5``, clamped to ``[0, n_in - 1]`` (edge pixels repeat).
    """
    src = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
    src = np.clip(src, 0.0, n_in - 1)
    lo = np.floor(src).astype(np.intp)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, src - lo


def resize_bilinear(images, size) -> np.ndarray:
    """Resize images with bilinear interpolation, align_corners=False (pixel centres).

    images: array of shape (..., H, W): one image (H, W), a stack (N, H, W) or
            (N, C, H, W); every leading axis is kept.
    size:   the output side ``S`` (square output) or a pair ``(out_h, out_w)``.

    Returns float32 of shape (..., out_h, out_w). This is the convention of OpenCV's
    ``INTER_LINEAR`` and PyTorch's ``interpolate(mode="bilinear", align_corners=False)``:
    output pixel ``o`` samples the input at ``(o + 0.5) * in / out - 0.5``, clamped to
    the image, so upscaling agrees with PIL's bilinear resize too. There is no
    antialiasing: shrinking by more than 2x skips input pixels (PIL would average them).
    Interpolation is computed as ``a + w * (b - a)`` in float64, so a constant image
    stays exactly constant and the same size returns the input unchanged (as float32).
    """
    images = np.asarray(images)
    if images.ndim < 2:
        raise ValueError(f"images must have shape (..., H, W), got shape {images.shape}")
    if np.ndim(size) == 0:
        out_h = out_w = size
    else:
        if len(size) != 2:
            raise ValueError(f"size must be an int or a pair (out_h, out_w), got {size!r}")
        out_h, out_w = size
    if not all(
        isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1
        for s in (out_h, out_w)
    ):
        raise ValueError(f"size must be a positive int or a pair of positive ints, got {size!r}")
    in_h, in_w = images.shape[-2:]
    if in_h == 0 or in_w == 0:
        raise ValueError(f"cannot resize empty images of shape {images.shape}")
    x = images.astype(np.float64)

    lo, hi, w = _axis_weights(in_h, int(out_h))
    top, bottom = x[..., lo, :], x[..., hi, :]
    x = top + w[:, None] * (bottom - top)

    lo, hi, w = _axis_weights(in_w, int(out_w))
    left, right = x[..., lo], x[..., hi]
    x = left + w * (right - left)
    return x.astype(np.float32)
