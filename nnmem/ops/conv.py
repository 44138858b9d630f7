"""2-D convolution (NCHW, cross-correlation as in every DL framework), with a bias.

Algorithms: "gemm" (im2col + one large matrix product per sample group: needs a workspace),
"direct" (loops, no workspace), and three of one geometry each (kernels/sizes.py's
SPECIALISED), which skip im2col and keep what they need in the same workspace: "conv3x3" (3x3,
stride 1, padding 1: register tiles on padded planes, kernels/cpu/conv3x3.py), "conv3x3s2" (the same
with stride 2, over phase planes: conv3x3s2.py) and "conv1x1" (one GEMM per sample on x's own
planes: conv1x1.py). With algorithm="auto" (SuperNeurons 3.5) each pass follows the memory free
at its step, and its numbers never do. A first candidate, picked by the geometry (on a CPU, and
on a planning device that plans for one, the specialised algorithm that applies, within
conv_geometry.FIRST_UP_TO channels and filters; else gemm), sizes the workspace:
as many samples of its need as the pool's free memory allows, in whole sample groups. A sample
group is what keeps the numbers: the gemm passes multiply, and the specialised ones sum,
groups of samples fixed by the geometry and the batch (kernels/sizes.py), so that a smaller
workspace changes how many groups a chunk holds, never a sum. When not even one group fits,
the pass runs direct, with no workspace (and sums that differ in the last bits:
``Conv2d.smallest_workspace_bytes`` tells a planner the workspace that keeps them).

The candidates are the first, the other workspace algorithm where it applies and one group of
it needs no more workspace than one group of the first, and direct unless a specialised
algorithm is among them: the same candidates in every workspace "auto" may give the pass. The
first time the pass runs it times them (``Device.time_kernel``: the way the device will run
it; a lone candidate is kept untimed) on the same work, whatever workspace this run has: one
sample group of the first candidate's, in one group's workspace, the smallest "auto" may give.
It keeps the first candidate unless another takes less than MARGIN of its time, so that noise
does not change the choice from run to run; then the choice is fixed (cuDNN's benchmark mode).

Why direct is no candidate beside a specialised algorithm: those kernels compute
direct's sums on register tiles, and on many cores one sample group is too little work to tell
them apart (their few short parallel loops look no faster than direct's one, which is the slow
one on the whole batch). On a 16-core Intel Xeon, ResNet-20 kept direct for 5 to 10 passes
(stride 2, 1x1, the first layer) from run to run; its stride-2 backward data then took 3.7 ms
in the step, the tiles 1.7 ms for all three passes of the other stride-2 layer.

Sizing for the first candidate, the one expected to be kept, keeps the memory the step plans
to what it needs: conv3x3's planes are 23-32% of the gemm's columns in ResNet-20's 3x3 layers.
The choice is remembered per device kind, pass and shapes, never the workspace, for the whole
process, so eager steps, graph replays, new devices and smaller workspaces agree (the numbers
never depend on which run chose); `CompiledStep.conv_algorithms()` reports it per layer.

Grouped convolution (``group=g``: each filter sees C/g of the channels; g = C is depthwise, as in
Xception's separable convolutions) runs the direct kernels, which take the group count: an
im2col of one group's channels would be a GEMM too thin to pay for its workspace.

Dilation (``dilation=(dh, dw)``: tap (p, q) reads the input dh*p rows and dw*q columns from the
window's corner) and asymmetric padding (``padding=(top, left, bottom, right)``, ONNX's pads
[x1_begin, x2_begin, x1_end, x2_end]), as ONNX's Conv has them, run the direct kernels too, so
that the workspace algorithms stay the ones for the common case: "auto" is "direct" there.
"""

import numpy as np

from nnmem.kernels import sizes
from nnmem.operation import Operator
from nnmem.ops import conv_geometry
from nnmem.ops.padding import four_sides, pair, whole

__all__ = ["Conv2d", "conv2d"]

#: Upper bound on one convolution's workspace; beyond it more, smaller GEMMs cost little.
WORKSPACE_LIMIT_BYTES = 256 * 2**20
#: the specialised ones' kernels take (out, a, b, workspace), conv1x1's the stride too
ALGORITHMS = ("auto", "gemm", "direct", *sizes.SPECIALISED)
SPECIALISED = sizes.SPECIALISED
#: (device kind, pass, shapes, stride, padding, dtype) -> what "auto" chose: no workspace in the
#: key, so that a pass keeps one algorithm whatever workspace a plan gives it.
BENCHMARKED = {}


class Conv2d(Operator):
    """y[n,o,i,j] = sum_{c,p,q} W[o,c,p,q] x[n,c,i*sh+p*dh-top,j*sw+q*dw-left] + b[o]  with
    stride, dilation and zero padding: `padding` is (ph, pw), the same on both sides, or
    (top, left, bottom, right)."""

    def __init__(self, stride=(1, 1), padding=(0, 0), algorithm="auto", group=1, dilation=(1, 1)):
        super().__init__()
        if algorithm not in ALGORITHMS:
            raise ValueError(f"conv2d: unknown algorithm {algorithm!r}; choose one of {ALGORITHMS}")
        if not isinstance(group, int) or group < 1:
            raise ValueError(f"conv2d: group must be a positive int, not {group!r}")
        self.stride, self.group = tuple(stride), group
        self.pads = four_sides(pair(padding), "conv2d")
        top, left, bottom, right = self.pads
        symmetric = (top, left) == (bottom, right)
        # (ph, pw) where both sides agree (the key "auto" remembers its choice by), else all four
        self.padding = (top, left) if symmetric else self.pads
        dilation = pair(dilation)
        if len(dilation) != 2 or not all(whole(d, 1) for d in dilation):
            raise ValueError(f"conv2d: dilation must be two ints >= 1, not {dilation!r}")
        self.dilation = tuple(int(d) for d in dilation)
        if algorithm in SPECIALISED and group != 1:
            raise ValueError(f"conv2d: algorithm={algorithm!r} is for group=1, not {group}")
        plain = symmetric and self.dilation == (1, 1)
        if algorithm in ("gemm", *SPECIALISED) and not plain:
            raise ValueError(
                f"conv2d: algorithm={algorithm!r} is for dilation (1, 1) and the same padding on "
                f"both sides, not dilation {self.dilation} and padding {padding}; use 'auto'"
            )
        self.algorithm = algorithm if group == 1 and plain else "direct"

    def forward(self, x, W, b=None):
        K = self.kernels
        g = self.group
        if x.ndim() != 4 or W.ndim() != 4 or x.shape[1] != W.shape[1] * g or W.shape[0] % g:
            raise ValueError(
                f"conv2d: input {x.shape} and filters {W.shape} with group={g}; need "
                f"(N, C, H, W) and (O, C/group, KH, KW), O divisible by the group"
            )
        n, c, h, w = x.shape
        o, _, kh, kw = W.shape
        (sh, sw), (top, left, bottom, right) = self.stride, self.pads
        (dh, dw) = self.dilation
        if h + top + bottom < dh * (kh - 1) + 1 or w + left + right < dw * (kw - 1) + 1:
            raise ValueError(
                f"conv2d: a {kh}x{kw} kernel (dilation {self.dilation}) does not fit the "
                f"{h}x{w} input (padding {self.padding}); use a smaller kernel or more padding"
            )
        out_shape = sizes.conv2d_output_shape(
            n, c, h, w, o, kh, kw, sh, sw, top, left, dh, dw, bottom, right
        )
        self.geometry = (c, h, w, o, kh, kw)
        if self.algorithm in SPECIALISED and self._specialised() != self.algorithm:
            raise ValueError(
                f"conv2d: algorithm={self.algorithm!r} is for {SPECIALISED[self.algorithm]}, "
                f"not {kh}x{kw} with stride {self.stride} and padding {self.padding}; use 'auto'"
            )
        self.has_bias = b is not None
        y = self.output(out_shape, x.dtype)
        ws = self._workspace(n, x.dtype, y.memsize(), ("forward",))
        self._conv_pass("forward", K.conv2d_forward_direct, K.conv2d_forward_gemm, y, x, W, ws)
        if b is not None:
            self.run(
                lambda y_, b_, _: K.add_bias_nchw(y_, b_),
                reads=(b, y),
                writes=(y,),
                tag=("add_bias_nchw",),
            )
        self.save(x if self.needs_grad[1] else None, W if self.needs_grad[0] else None)
        return y

    def backward(self, dy):
        K = self.kernels
        x, W = self.saved
        c, h, w, o, kh, kw = self.geometry
        dx = dW = db = None
        grads_bytes = 0
        if self.needs_grad[0]:
            dx = self.output((dy.shape[0], c, h, w), dy.dtype)
            grads_bytes += dx.memsize()
        if self.needs_grad[1]:
            dW = self.output((o, c // self.group, kh, kw), dy.dtype)
            grads_bytes += dW.memsize()
        # an input evicted to the host by the tensor cache needs its bytes back before the
        # pass runs: the workspace must leave room for it too
        away = sum(t.memsize() for t in (dy, x, W) if t is not None and t.block.offset is None)
        passes = ("backward data",) * (dx is not None) + ("backward filter",) * (dW is not None)
        ws = self._workspace(dy.shape[0], dy.dtype, grads_bytes + away, passes)
        if dx is not None:
            self._conv_pass(
                "backward data",
                K.conv2d_backward_data_direct,
                K.conv2d_backward_data_gemm,
                dx,
                dy,
                W,
                ws,
            )
        if dW is not None:
            self._conv_pass(
                "backward filter",
                K.conv2d_backward_filter_direct,
                K.conv2d_backward_filter_gemm,
                dW,
                dy,
                x,
                ws,
            )
        if self.has_bias and self.needs_grad[2]:
            db = self.output((o,), dy.dtype)
            self.run(K.bias_grad_nchw, reads=(dy,), writes=(db,), tag=("bias_grad_nchw",))
        return (dx, dW, db) if self.has_bias else (dx, dW)

    def _conv_pass(self, pass_name, direct, gemm, out, a, b, ws):
        """Run one of the three convolution passes, out = f(a, b), with the gemm algorithm (or
        the specialised algorithm's kernel) when there is a workspace and the direct one
        otherwise ("auto": the fastest of them, given a workspace that holds one sample group
        of the pass)."""
        (sh, sw), g = self.stride, self.group
        ph, pw, pb, pr = self.pads
        dh, dw = self.dilation
        special = self._specialised()  # the specialised algorithm of this geometry, or None
        kernel = special and getattr(self.kernels, f"{special}_{pass_name.replace(' ', '_')}")
        strides = (sh, sw) if special == "conv1x1" else ()

        # the workspace algorithms all take the workspace's array, so any can run in another's
        # place; under "auto", the first candidate is kept unless another is clearly faster
        # (_time_candidates)
        def by_special(out_, ws_, a_, b_):
            kernel(out_, a_, b_, ws_, *strides)

        def by_gemm(out_, ws_, a_, b_):
            gemm(out_, a_, b_, ws_, sh, sw, ph, pw)

        if self.algorithm in SPECIALISED:
            self.run(by_special, reads=(a, b), writes=(out, ws))
            return
        n = a.shape[0]
        if self.algorithm == "auto" and ws is not None:
            first = self._workspace_algorithm()
            group = self._sample_group(first, pass_name, n)
            least = group * self._per_sample(first)
            if ws.size() < least:  # not one sample group of this pass: direct keeps no numbers
                ws = None
        if ws is None:
            self.run(
                lambda out_, a_, b_: direct(out_, a_, b_, sh, sw, ph, pw, g, dh, dw, pb, pr),
                reads=(a, b),
                writes=(out,),
            )
            return
        if self.algorithm == "gemm":
            self.run(by_gemm, reads=(a, b), writes=(out, ws))
            return
        # "auto": the candidates and the work they are timed on follow the geometry, never the
        # workspace this run has (it holds one sample group of the first candidate)
        runs = {"gemm": by_gemm, special: by_special}
        candidates = {first: runs[first]}
        other = special if first == "gemm" else "gemm"
        if other is not None:
            if self._sample_group(other, pass_name, n) * self._per_sample(other) <= least:
                candidates[other] = runs[other]
        if special not in candidates:  # (the module's docstring says why only there)
            candidates["direct"] = lambda out_, ws_, a_, b_: direct(out_, a_, b_, sh, sw, ph, pw)
        key = (self.device.kind, pass_name, a.shape, b.shape, out.shape)
        key += (self.stride, self.padding, out.dtype)
        device = self.device

        def fastest(out_, ws_, a_, b_):
            if key not in BENCHMARKED:  # timed on one sample group's arrays (backward filter:
                # out is dw, with no batch axis, and a, b are dy and x)
                if pass_name == "backward filter":
                    timed = (out_, ws_[:least], a_[:group], b_[:group])
                else:
                    timed = (out_[:group], ws_[:least], a_[:group], b_)
                BENCHMARKED[key] = _time_candidates(device, candidates, timed)
            candidates[BENCHMARKED[key]](out_, ws_, a_, b_)

        fastest.conv_algorithm = (pass_name, lambda: BENCHMARKED.get(key, "not run yet"))
        self.run(fastest, reads=(a, b), writes=(out, ws))

    def _specialised(self):
        """The specialised algorithm that applies to this geometry, or None
        (conv_geometry.specialised)."""
        kh, kw = self.geometry[4:]
        return conv_geometry.specialised(kh, kw, self.stride, self.pads, self.dilation, self.group)

    def _workspace_algorithm(self):
        """The algorithm whose need sizes the workspace: the one asked for ("gemm" or a
        specialised one), "auto"'s first candidate, or None ("direct", grouped convolutions):
        conv_geometry.workspace_algorithm."""
        return conv_geometry.workspace_algorithm(
            self.algorithm, self.geometry, self.stride, self.pads, self.dilation, self.group,
            self.device.plans_for,
        )  # fmt: skip

    def _per_sample(self, algorithm):
        """Workspace elements the op gives `algorithm` per sample (conv_geometry.per_sample)."""
        return conv_geometry.per_sample(algorithm, self.geometry, self.stride, self.padding)

    def _sample_group(self, algorithm, pass_name, n):
        """Samples per group of `algorithm`'s `pass_name` on a batch of n
        (conv_geometry.sample_group)."""
        return conv_geometry.sample_group(
            algorithm, pass_name, n, self.geometry, self.stride, self.padding,
            self.device.plans_for,
        )  # fmt: skip

    def smallest_workspace_bytes(self, pass_name, n, dtype):
        """The fewest workspace bytes that `pass_name` ("forward", "backward data" or "backward
        filter") of this convolution, on a batch of `n` samples of `dtype`, may be given and
        still compute the numbers it computes with the whole batch's workspace: one sample
        group of the algorithm that sizes its workspace (the one asked for, or "auto"'s first
        candidate), whose passes multiply or sum such groups one after another. Under a
        workspace cap (``Device.limit_workspaces``) below it, "auto" runs the pass with the
        direct kernels: other sums, other last bits. 0 where the pass takes no workspace
        ("direct", grouped convolutions). For a planner: known once the forward has run or
        been recorded (it sets the geometry)."""
        algorithm = self._workspace_algorithm()
        if algorithm is None:
            return 0
        elements = self._sample_group(algorithm, pass_name, n) * self._per_sample(algorithm)
        return elements * np.dtype(dtype).itemsize

    def _workspace(self, n, dtype, extra_bytes, passes):
        """The workspace tensor for `passes` (the names of the passes that share it), or None
        for the direct algorithm: the whole batch's for "gemm" and the specialised algorithms;
        under "auto", as many samples of its first candidate's need as the free memory holds
        (the specialised one's where it is the first, else the gemm's columns: conv_geometry),
        in whole sample groups of the largest group of `passes` that fits (a pass whose group
        does not fit runs direct: _conv_pass), and None when no pass's group fits.

        `extra_bytes` are the outputs still to be allocated at this step: the workspace must
        leave room for them."""
        algorithm = self._workspace_algorithm()
        if algorithm is None or not passes:
            return None
        per_sample = self._per_sample(algorithm)
        itemsize = dtype.itemsize
        samples = n
        groups = [self._sample_group(algorithm, p, n) for p in passes]
        if self.algorithm == "auto" and per_sample > 0:  # (conv1x1 with stride 1 needs none:
            # an empty workspace, which any memory holds)
            free = self.device.pool.largest_free_block() - extra_bytes
            samples = min(n, max(min(free, WORKSPACE_LIMIT_BYTES), 0) // (per_sample * itemsize))
            if self.device.workspace_limit is not None:  # a plan lowering workspaces: never
                # below one group of every pass, so that no number changes (free memory
                # permitting)
                by_limit = self.device.workspace_limit // (per_sample * itemsize)
                samples = min(samples, max(by_limit, max(groups)))
            fitting = [group for group in groups if group <= samples]
            if not fitting:
                return None
            if samples < n:  # whole groups (the last one of the batch may be smaller)
                samples -= samples % max(fitting)
        if algorithm == "gemm":  # the gemm passes work one group at a time: more is unused
            samples = min(samples, max(groups))
        return self.output((samples * per_sample,), dtype)


#: Another algorithm replaces the first candidate only when it is this much faster: two that
#: time alike would otherwise be picked by the noise of the moment, and the choice (whose
#: numbers differ in the last bits) would change from one process to the next.
MARGIN = 0.8


def _time_candidates(device, candidates, arrays):
    """The name of the candidate to keep: the first, unless another takes less than MARGIN of
    its time on these arrays (timed by the device: Device.time_kernel); a lone one untimed."""
    first = next(iter(candidates))
    if len(candidates) == 1:
        return first
    seconds = {name: device.time_kernel(run, arrays) for name, run in candidates.items()}
    fastest = min(seconds, key=seconds.get)
    return fastest if seconds[fastest] < MARGIN * seconds[first] else first


def conv2d(x, W, b=None, stride=1, padding=0, algorithm="auto", group=1, dilation=1):
    """Functional form: conv2d(x, W, b, stride, padding); padding one int, (ph, pw) or
    (top, left, bottom, right), dilation one int or (dh, dw)."""
    op = Conv2d(pair(stride), pair(padding), algorithm, group, pair(dilation))
    return op(x, W) if b is None else op(x, W, b)
