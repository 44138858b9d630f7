"""What a convolution's geometry asks of its workspace (ops/conv.py's Conv2d): the specialised
algorithm that applies, "auto"'s first candidate, the workspace elements a sample and the
samples a group. Pure functions of the geometry, the stride, the padding and the backend.

Why a module of its own, and why cached. An eager step makes each convolution's operator anew
and asks these a dozen times a layer (the forward's workspace, each pass's group and its
candidates). They are kept for the process (functools.lru_cache: a few entries a network), as
"auto"'s choices are (ops/conv.py's BENCHMARKED). With two smaller trims of Conv2d (the pool's
largest free block asked alone, the dtype itself in "auto"'s key, not its name), this took
the Python of ResNet-20's eager step (batch 32, the kernels switched off) from 5.0 to 4.3 ms,
measured on a 2-core AMD EPYC, this version and the one before in turn.

What they read besides their arguments, the constants of kernels/sizes.py and FIRST_UP_TO
below, is fixed for a process: code that changes one (an experiment with GEMM_GROUP_COLUMNS,
say) must call each function's cache_clear() too, or the old answers stay.

Arguments: `geometry` is (C, H, W, O, KH, KW), `stride` (sh, sw), `pads` (top, left, bottom,
right), `dilation` (dh, dw), `backend` the device a plan is for ("cpu" or "cuda").
"""

import functools

from nnmem.kernels import sizes

#: On a CPU (and a planning device planning for one), the first candidate is conv3x3 where it
#: applies and the channels and filters are at most this many, gemm otherwise (and on a GPU,
#: where the rule is not measured). Measured on 2 cores (AVX-512), float32, GFLOP/s of the
#: three passes: conv3x3 beats gemm at 16-128 channels (ResNet-20's 64 channels of 8x8:
#: conv3x3 113-125, gemm 84-109), and gemm wins from 256 (8x8: conv3x3 118-134, gemm 153-169).
CONV3X3_FIRST_UP_TO = 128
#: The same rule per specialised algorithm (None: any width), on the most of C and O.
#: bench/conv.py, one thread, GFLOP/s of the passes: conv3x3s2 beats gemm at 32 (ResNet-20's 16
#: channels of 32x32 to 32 filters: 47, 41, 41 against 36, 40, 34), ties at 64 (32 of 16x16 to
#: 64: 50, 34, 51 against 51, 52, 54) and loses at 128 (64 to 128, 2 cores: 55, 33, 49 against
#: 75, 65, 84); conv1x1 runs the gemm's products less its copies, faster at every width
#: measured (16 to 2048 channels).
FIRST_UP_TO = {"conv3x3": CONV3X3_FIRST_UP_TO, "conv3x3s2": 64, "conv1x1": None}


@functools.lru_cache(maxsize=4096)
def specialised(kh, kw, stride, pads, dilation, group):
    """The specialised algorithm (sizes.SPECIALISED) that applies to a KH x KW kernel with this
    stride, with the same padding on every side, no dilation and one group; else None."""
    plain = pads[:2] == pads[2:] and dilation == (1, 1) and group == 1
    return sizes.specialised_conv(kh, kw, *stride, *pads[:2]) if plain else None


@functools.lru_cache(maxsize=4096)
def workspace_algorithm(algorithm, geometry, stride, pads, dilation, group, backend):
    """The algorithm whose need sizes the workspace: the one asked for ("gemm" or a specialised
    one), None for "direct", and for "auto" its first candidate, the one it expects to keep:
    the specialised algorithm where it applies within FIRST_UP_TO channels and filters on a CPU
    (where the rule was measured), else gemm."""
    if algorithm != "auto":
        return None if algorithm == "direct" else algorithm
    c, _, _, o, kh, kw = geometry
    special = specialised(kh, kw, stride, pads, dilation, group)
    if backend != "cpu" or special is None:
        return "gemm"
    first = FIRST_UP_TO[special] is None or max(c, o) <= FIRST_UP_TO[special]
    return special if first else "gemm"


@functools.lru_cache(maxsize=4096)
def per_sample(algorithm, geometry, stride, padding):
    """Workspace elements `algorithm` takes per sample: the most any of its passes needs (the
    gemm's columns, the 3x3 loops' planes, conv1x1's kept pixels: none with stride 1);
    `padding` (ph, pw)."""
    c, h, w, o, kh, kw = geometry
    if algorithm == "gemm":
        return sizes.conv2d_gemm_workspace_per_sample(c, h, w, o, kh, kw, *stride, *padding)
    return sizes.specialised_workspace_per_sample(algorithm, c, h, w, o, *stride)


@functools.lru_cache(maxsize=4096)
def sample_group(algorithm, pass_name, n, geometry, stride, padding, backend):
    """Samples per group of `algorithm`'s `pass_name` on a batch of n (kernels/sizes.py): the
    pass's numbers are those of the whole batch's workspace in any workspace that holds one
    group; `padding` (ph, pw)."""
    c, h, w, o, kh, kw = geometry
    if algorithm != "gemm":
        return sizes.specialised_sample_group(algorithm, pass_name, n, h, w)
    _, _, oh, ow = sizes.conv2d_output_shape(n, c, h, w, o, kh, kw, *stride, *padding)
    return sizes.conv2d_gemm_sample_group(n, oh, ow, backend)
