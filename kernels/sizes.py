"""Sizes on the host: the output shapes and workspaces of the window kernels, in plain Python.

These are not kernels (kernels/contract.py): they compute no array, import no Numba, and are
the same for both backends. An operation reads them to size the outputs and workspace it hands
its kernels, on any device, the planning device included (which runs no kernel at all); the
kernels read them to check what they are given.
"""


def window_output_size(size, k, stride, pad):
    """Output length of a window of length k, stride and symmetric zero padding:
    (size+2*pad-k)//stride+1."""
    if k < 1 or stride < 1 or pad < 0:
        raise ValueError(
            "window: need kernel >= 1, stride >= 1, padding >= 0; "
            f"got k={k}, stride={stride}, pad={pad}"
        )
    if size + 2 * pad < k:
        raise ValueError(f"window: kernel {k} is larger than the padded input {size} + 2*{pad}")
    return (size + 2 * pad - k) // stride + 1


# ---------------------------------------------------------------- convolution (kernels conv.py)
def conv2d_output_shape(n, c, h, w, o, kh, kw, sh, sw, ph, pw):
    """(n, o, oh, ow) with oh = (h+2ph-kh)//sh+1, ow = (w+2pw-kw)//sw+1."""
    return (n, o, window_output_size(h, kh, sh, ph), window_output_size(w, kw, sw, pw))


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


def conv3x3_plane(h, w):
    """Elements of one padded plane: (H+2)*(W+2), and two trailing zeros that the last row's
    reads of the two columns past the output run into."""
    return (h + 2) * (w + 2) + 2


def conv3x3_forward_need(inputs, outputs, h, w):
    """Workspace elements per sample of conv3x3's forward pass (and of backward data, with the
    channels and filters swapped): the padded planes of its inputs, and the row-padded sums of
    its outputs and a spare."""
    return inputs * conv3x3_plane(h, w) + (outputs + 1) * h * (w + 2)


def conv3x3_filter_need(c, o, h, w):
    """Workspace elements per sample of conv3x3's backward filter: C padded planes of x and O
    planes of dy."""
    return (c + o) * conv3x3_plane(h, w)


#: Elements one loop of conv3x3's backward filter runs over, at most: a group of consecutive
#: samples' planes laid end to end (kernels/cpu/conv3x3.py, _planes_filter, says why).
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


# ---------------------------------------------------------------- pooling (pool.py)
def pool2d_output_shape(n, c, h, w, kh, kw, sh, sw, ph, pw):
    """(n, c, oh, ow) with oh = (h+2ph-kh)//sh+1, ow = (w+2pw-kw)//sw+1;
    requires ph < kh, pw < kw."""
    if ph >= kh or pw >= kw:
        raise ValueError(
            "pool2d: padding must be smaller than the window (ph < kh, pw < kw); "
            f"got ph={ph}, kh={kh}, pw={pw}, kw={kw}"
        )
    return (n, c, window_output_size(h, kh, sh, ph), window_output_size(w, kw, sw, pw))
