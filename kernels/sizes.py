"""Sizes on the host: the output shapes and workspaces of the window kernels, in plain Python.

These are not kernels (kernels/contract.py): they compute no array, import no Numba, and are
the same for both backends. An operation reads them to size the outputs and workspace it hands
its kernels, on any device, the planning device included (which runs no kernel at all); the
kernels read them to check what they are given.
"""


def window_output_size(size, k, stride, pad, pad_end=None, dilation=1, ceil_mode=False):
    """Output length of a window of k taps `dilation` apart (its extent e = dilation*(k-1)+1),
    moved by `stride` over an input of `size` with zero padding `pad` before and `pad_end` after
    (None: `pad`, symmetric): floor((size+pad+pad_end-e)/stride)+1. With ceil_mode, the
    ceiling instead, less one where that last window would start past the input (ONNX's and
    PyTorch's rule: every window starts inside the input or the padding before it)."""
    pad_end = pad if pad_end is None else pad_end
    if k < 1 or stride < 1 or dilation < 1 or pad < 0 or pad_end < 0:
        raise ValueError(
            "window: need kernel >= 1, stride >= 1, dilation >= 1, padding >= 0; "
            f"got k={k}, stride={stride}, dilation={dilation}, pad={pad}, pad_end={pad_end}"
        )
    extent = dilation * (k - 1) + 1
    if size + pad + pad_end < extent:
        raise ValueError(
            f"window: kernel extent {extent} is larger than the padded input {size} + {pad} "
            f"+ {pad_end}"
        )
    span = size + pad + pad_end - extent
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    return out - 1 if (out - 1) * stride >= size + pad else out


# ---------------------------------------------------------------- convolution (kernels conv.py)
def conv2d_output_shape(
    n, c, h, w, o, kh, kw, sh, sw, ph, pw, dil_h=1, dil_w=1, ph_end=None, pw_end=None
):
    """(n, o, oh, ow) with oh = (h+ph+ph_end-dil_h*(kh-1)-1)//sh+1, ow likewise: padding ph, pw
    before (top, left) and ph_end, pw_end after (bottom, right; None: symmetric)."""
    return (
        n,
        o,
        window_output_size(h, kh, sh, ph, ph_end, dil_h),
        window_output_size(w, kw, sw, pw, pw_end, dil_w),
    )


def conv2d_gemm_workspace_per_sample(c, h, w, o, kh, kw, sh, sw, ph, pw):
    """Workspace elements one sample needs in any GEMM pass: (C*KH*KW + O) * OH * OW."""
    _, _, oh, ow = conv2d_output_shape(1, c, h, w, o, kh, kw, sh, sw, ph, pw)
    return (c * kh * kw + o) * oh * ow


#: Output pixels (GEMM columns) a sample group of the gemm passes reaches, per backend. CPU,
#: measured here (float32, batch 32, one thread's CPU time): ResNet-20's layers take 0.5-1.1x
#: the time of one GEMM over the whole batch (whose columns overflow the caches), AlexNet's
#: conv2 1.04-1.09x; no other size from 512 to 8192 columns was faster throughout. A GPU needs
#: more columns to have tiles for all its cores (kernels/cuda/conv.py).
GEMM_GROUP_COLUMNS = {"cpu": 1024, "cuda": 8192}


def conv2d_gemm_sample_group(n, oh, ow, backend):
    """Samples per group of the gemm passes on `backend` ("cpu" or "cuda"): the fewest whose
    OH*OW output pixels make GEMM_GROUP_COLUMNS[backend] columns, at most the batch N, at least
    one. The passes multiply one group at a time, samples [0, G), [G, 2G), ... (the last one may
    be smaller), so every GEMM has a shape fixed by the geometry and the batch: the same sums
    in the same order whatever the workspace, which must hold one group (G samples of
    conv2d_gemm_workspace_per_sample)."""
    return max(1, min(n, -(-GEMM_GROUP_COLUMNS[backend] // (oh * ow))))


# ---------------------------------------------------------------- 3x3 convolution (conv3x3.py)
def conv3x3_applies(kh, kw, sh, sw, ph, pw):
    """Does this geometry (kernel, stride, padding) have a conv3x3 kernel?"""
    return (kh, kw, sh, sw, ph, pw) == (3, 3, 1, 1, 1, 1)


#: Elements of the longest vector of the CPU kernels' register tiles (kernels/cpu/_simd.py):
#: 16 float32 in one AVX-512 register.
VECTOR_LANES = 16


def conv3x3_plane(h, w):
    """Elements of one padded plane: (H+2)*(W+2), and two trailing zeros that the last row's
    reads of the two columns past the output run into."""
    return (h + 2) * (w + 2) + 2


def conv3x3_sums(h, w):
    """Elements of one output plane's sums in conv3x3's forward pass: its H rows as long as the
    padded ones, H*(W+2), and at least one vector (VECTOR_LANES), which a plane that small
    computes whole (kernels/cpu/conv3x3.py)."""
    return max(h * (w + 2), VECTOR_LANES)


def conv3x3_forward_plane(h, w):
    """Elements of one padded input plane of conv3x3's forward pass: conv3x3_plane, and the
    zeros a plane's one vector of sums reads past it when it has fewer than VECTOR_LANES."""
    return conv3x3_plane(h, w) + conv3x3_sums(h, w) - h * (w + 2)


def conv3x3_forward_need(inputs, outputs, h, w):
    """Workspace elements per sample of conv3x3's forward pass (and of backward data, with the
    channels and filters swapped): the padded planes of its inputs, and the row-padded sums of
    its outputs."""
    return inputs * conv3x3_forward_plane(h, w) + outputs * conv3x3_sums(h, w)


def conv3x3_filter_need(c, o, h, w):
    """Workspace elements per sample of conv3x3's backward filter: C padded planes of x, dy
    transposed (a row of O filters per pixel, H*W*O), and room for one vector read past the
    last row (VECTOR_LANES; kernels/cpu/_filter_lanes.py)."""
    return c * conv3x3_plane(h, w) + h * w * o + VECTOR_LANES


#: Padded-plane elements of one sample group of conv3x3's backward filter, at most: each
#: group's sums are one chain of multiply-adds per dw entry, from zero, and the groups' sums
#: add into dw in order (kernels/cpu/_filter_lanes.py), so a chain stays a group long (about
#: 1,000-1,600 pixels: one 32x32 sample, six of 16x16, twenty of 8x8). The value came from the
#: earlier loop, whose speed it set; it fixes the order of the sums, so a new value would
#: change the last bits of every gradient.
CONV3X3_GROUP_ELEMENTS = 2048


def conv3x3_filter_sample_group(n, h, w):
    """Samples per group of conv3x3's backward filter: as many padded planes as make at most
    CONV3X3_GROUP_ELEMENTS elements, at most the batch N, at least one. Each group's sums are
    added into dw in order, groups [0, G), [G, 2G), ...: the chunks of the batch that fit the
    workspace are whole groups, so the workspace must hold one group (G samples of
    conv3x3_filter_need) and its size never changes the numbers."""
    return max(1, min(n, CONV3X3_GROUP_ELEMENTS // conv3x3_plane(h, w)))


def conv3x3_workspace_per_sample(c, o, h, w):
    """Workspace elements one sample needs in any of the three conv3x3 passes: the most of
    forward's, backward data's and backward filter's needs."""
    return max(
        conv3x3_forward_need(c, o, h, w),
        conv3x3_forward_need(o, c, h, w),
        conv3x3_filter_need(c, o, h, w),
    )


# ---------------------------------------------------------------- stride-2 3x3 (conv3x3s2.py)
def conv3x3s2_applies(kh, kw, sh, sw, ph, pw):
    """Does this geometry (kernel, stride, padding) have a conv3x3s2 kernel?"""
    return (kh, kw, sh, sw, ph, pw) == (3, 3, 2, 2, 1, 1)


def conv3x3s2_phase_plane(oh, ow):
    """Elements of one phase plane of a padded input whose output is OH x OW: (OH+1) rows
    W2 = OW+1 long, and a trailing zero that the last row's read of the column past the output
    runs into."""
    return (oh + 1) * (ow + 1) + 1


def conv3x3s2_phase_sums(oh, ow):
    """Elements of one phase plane's sums in conv3x3s2's backward data: a row W2 = OW+1 long
    (row 0, which phase a = 0 does not use), then the OH rows a phase computes, at least one
    vector (VECTOR_LANES)."""
    return (ow + 1) + max(oh * (ow + 1), VECTOR_LANES)


def conv3x3s2_dy_plane(oh, ow):
    """Elements of one plane of dy padded by a zero row above, a zero column to the left and
    zeros below: as many as a phase plane's sums read, the sums and their farthest tap, W2 + 1
    past them. (OH+2)*W2 + 1 where a phase has a vector's sums or more."""
    return conv3x3s2_phase_sums(oh, ow) + (ow + 1) + 1


def conv3x3s2_sums(oh, ow):
    """Elements of one output plane's sums in conv3x3s2's forward pass: OH rows as long as the
    phase planes', OH*(OW+1), and at least one vector (VECTOR_LANES)."""
    return max(oh * (ow + 1), VECTOR_LANES)


def conv3x3s2_forward_need(c, o, oh, ow):
    """Workspace elements per sample of conv3x3s2's forward pass: the four phase planes of each
    input channel, the row-padded sums of each output plane, and room for the reads of the
    last plane's vector of sums past its end when a plane has fewer sums than a vector."""
    sums = conv3x3s2_sums(oh, ow)
    return 4 * c * conv3x3s2_phase_plane(oh, ow) + o * sums + sums - oh * (ow + 1)


def conv3x3s2_data_need(c, o, oh, ow):
    """Workspace elements per sample of conv3x3s2's backward data: dy's padded planes, and the
    four phase planes' sums of each dx plane."""
    return o * conv3x3s2_dy_plane(oh, ow) + c * 4 * conv3x3s2_phase_sums(oh, ow)


def conv3x3s2_filter_need(c, o, oh, ow):
    """Workspace elements per sample of conv3x3s2's backward filter: the phase planes of x, dy
    transposed (OH*OW*O), and room for one vector read past its last row (VECTOR_LANES;
    kernels/cpu/_filter_lanes.py)."""
    return 4 * c * conv3x3s2_phase_plane(oh, ow) + oh * ow * o + VECTOR_LANES


def conv3x3s2_filter_sample_group(n, oh, ow):
    """Samples per group of conv3x3s2's backward filter: as many phase planes as make at most
    CONV3X3_GROUP_ELEMENTS elements, at most N, at least one (conv3x3_filter_sample_group's
    rule: the workspace must hold one group, and its size never changes the numbers)."""
    return max(1, min(n, CONV3X3_GROUP_ELEMENTS // conv3x3s2_phase_plane(oh, ow)))


def conv3x3s2_workspace_per_sample(c, o, h, w):
    """Workspace elements one sample of a C x H x W input needs in any of the three conv3x3s2
    passes (O filters): the most of their needs."""
    oh, ow = (h + 1) // 2, (w + 1) // 2
    return max(
        conv3x3s2_forward_need(c, o, oh, ow),
        conv3x3s2_data_need(c, o, oh, ow),
        conv3x3s2_filter_need(c, o, oh, ow),
    )


# ---------------------------------------------------------------- 1x1 (conv1x1.py)
def conv1x1_applies(kh, kw, sh, sw, ph, pw):
    """Does this geometry (kernel, stride, padding) have a conv1x1 kernel: 1x1, no padding?"""
    return (kh, kw, ph, pw) == (1, 1, 0, 0)


def conv1x1_workspace_per_sample(c, h, w, sh, sw):
    """Workspace elements one sample of a C x H x W input needs in any conv1x1 pass: the pixels
    the stride keeps, C*OH*OW; none with stride 1 (the GEMMs read x's own planes)."""
    if (sh, sw) == (1, 1):
        return 0
    return c * ((h - 1) // sh + 1) * ((w - 1) // sw + 1)


# ---------------------------------------------------------------- the specialised convolutions
#: the convolution kernels of one geometry each, which conv.py's "auto" prefers to im2col + GEMM
#: on a CPU: where each applies, in words (kernel, stride, padding: the *_applies rules above)
SPECIALISED = {
    "conv3x3": "3x3 filters with stride 1 and padding 1",
    "conv3x3s2": "3x3 filters with stride 2 and padding 1",
    "conv1x1": "1x1 filters without padding",
}


def specialised_conv(kh, kw, sh, sw, ph, pw):
    """The specialised convolution (SPECIALISED) with a kernel for this geometry, or None."""
    rules = (conv3x3_applies, conv3x3s2_applies, conv1x1_applies)
    names = [name for name, rule in zip(SPECIALISED, rules) if rule(kh, kw, sh, sw, ph, pw)]
    return names[0] if names else None


def specialised_workspace_per_sample(name, c, h, w, o, sh, sw):
    """Workspace elements one sample needs in any pass of the specialised convolution `name`
    (C x H x W input, O filters, stride (sh, sw))."""
    if name == "conv1x1":
        return conv1x1_workspace_per_sample(c, h, w, sh, sw)
    if name == "conv3x3":
        return conv3x3_workspace_per_sample(c, o, h, w)
    return conv3x3s2_workspace_per_sample(c, o, h, w)


def specialised_sample_group(name, pass_name, n, h, w):
    """Samples per group of `pass_name` of the specialised convolution `name` on a batch of N
    (H x W input): the 3x3 loops' backward filter sums fixed groups; their other passes compute
    each sample alone, and conv1x1's backward filter adds the samples one by one (1)."""
    if pass_name != "backward filter" or name == "conv1x1":
        return 1
    if name == "conv3x3":
        return conv3x3_filter_sample_group(n, h, w)
    return conv3x3s2_filter_sample_group(n, (h + 1) // 2, (w + 1) // 2)


# ---------------------------------------------------------------- pooling (pool.py)
def pool2d_output_shape(
    n, c, h, w, kh, kw, sh, sw, ph, pw, ph_end=None, pw_end=None, ceil_mode=False
):
    """(n, c, oh, ow) with oh = (h+ph+ph_end-kh)//sh+1 (the ceiling with ceil_mode:
    window_output_size), ow likewise; padding ph, pw before and ph_end, pw_end after (None:
    symmetric), each smaller than the window, so that every window holds an input element."""
    ph_end = ph if ph_end is None else ph_end
    pw_end = pw if pw_end is None else pw_end
    if max(ph, ph_end) >= kh or max(pw, pw_end) >= kw:
        raise ValueError(
            "pool2d: padding must be smaller than the window (ph, ph_end < kh; pw, pw_end < kw); "
            f"got ph={ph}, ph_end={ph_end}, kh={kh}, pw={pw}, pw_end={pw_end}, kw={kw}"
        )
    return (
        n,
        c,
        window_output_size(h, kh, sh, ph, ph_end, ceil_mode=ceil_mode),
        window_output_size(w, kw, sw, pw, pw_end, ceil_mode=ceil_mode),
    )
