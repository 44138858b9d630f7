"""2-D convolution (NCHW, cross-correlation as in every DL framework), with a bias.

Three algorithms: "gemm" (im2col + one large matrix product per chunk of samples: needs a
workspace), "direct" (loops, no workspace), and for 3x3 filters with stride 1 and padding 1,
"conv3x3" (loops over padded planes, which it keeps in the same workspace: kernels/cpu/conv3x3.py
says why it beats the GEMM for few channels). With algorithm="auto" (SuperNeurons 3.5) each
pass follows the memory free at its step. A first candidate, picked by the geometry (on a CPU,
and on a planning device that plans for one, conv3x3 where it applies to at most
CONV3X3_FIRST_UP_TO channels and filters; else gemm), sizes the workspace: as many samples of
its need per chunk as the pool's free memory allows. The first
time the pass runs it times every algorithm that fits that workspace (``Device.time_kernel``:
the way the device will run it) and keeps the first candidate unless another takes less than
MARGIN of its time, so that noise does not change the choice from run to run; then the choice
is fixed (cuDNN's benchmark mode). Sizing for the first candidate, the one expected to be
kept, keeps the memory the step plans to what it needs: conv3x3's planes are 23-32% of the
gemm's columns in ResNet-20's 3x3 layers (a gemm timed in such a workspace runs in smaller
chunks, so it must be clearly faster even then). Where conv3x3's sample is the larger (one
input channel and many filters, maps of 2x2 or less), a tight budget that holds a gemm sample
but no conv3x3 one leaves direct. When not even one sample of the first candidate's need
fits, direct is the only candidate. The choice is remembered per device kind and geometry for
the whole process, so eager steps, graph replays and new devices agree (the numbers never
depend on which run chose); `CompiledStep.conv_algorithms()` reports it per layer.

Grouped convolution (``group=g``: each filter sees C/g of the channels; g = C is depthwise, as in
Xception's separable convolutions) runs the direct kernels, which take the group count: an
im2col of one group's channels would be a GEMM too thin to pay for its workspace.
"""

from nnmem.kernels import sizes
from nnmem.operation import Operator

__all__ = ["Conv2d", "conv2d"]

#: Upper bound on one convolution's workspace; beyond it more, smaller GEMMs cost little.
WORKSPACE_LIMIT_BYTES = 256 * 2**20
ALGORITHMS = ("auto", "gemm", "direct", "conv3x3")
#: (device kind, pass, shapes, workspace, stride, padding, dtype) -> what "auto" chose.
BENCHMARKED = {}


class Conv2d(Operator):
    """y[n,o] = sum_c W[o,c] (*) x[n,c] + b[o]  with stride and zero padding."""

    def __init__(self, stride=(1, 1), padding=(0, 0), algorithm="auto", group=1):
        super().__init__()
        if algorithm not in ALGORITHMS:
            raise ValueError(f"conv2d: unknown algorithm {algorithm!r}; choose one of {ALGORITHMS}")
        if not isinstance(group, int) or group < 1:
            raise ValueError(f"conv2d: group must be a positive int, not {group!r}")
        self.stride, self.padding, self.group = tuple(stride), tuple(padding), group
        if algorithm == "conv3x3" and group != 1:
            raise ValueError(f"conv2d: algorithm='conv3x3' is for group=1, not {group}")
        self.algorithm = algorithm if group == 1 else "direct"

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
        (sh, sw), (ph, pw) = self.stride, self.padding
        if h + 2 * ph < kh or w + 2 * pw < kw:
            raise ValueError(
                f"conv2d: a {kh}x{kw} kernel does not fit the {h}x{w} input "
                f"(padding {self.padding}); use a smaller kernel or more padding"
            )
        out_shape = sizes.conv2d_output_shape(n, c, h, w, o, kh, kw, sh, sw, ph, pw)
        self.geometry = (c, h, w, o, kh, kw)
        if self.algorithm == "conv3x3" and not sizes.conv3x3_applies(kh, kw, sh, sw, ph, pw):
            raise ValueError(
                f"conv2d: algorithm='conv3x3' is for 3x3 filters with stride 1 and padding 1, "
                f"not {kh}x{kw} with stride {self.stride} and padding {self.padding}; use 'auto'"
            )
        self.has_bias = b is not None
        y = self.output(out_shape, x.dtype)
        ws = self._workspace(n, x.dtype, extra_bytes=y.memsize())
        self._conv_pass(
            "forward",
            K.conv2d_forward_direct,
            K.conv2d_forward_gemm,
            y,
            x,
            W,
            ws,
            K.conv3x3_forward,
        )
        if b is not None:
            self.run(lambda y_, b_, _: K.add_bias_nchw(y_, b_), reads=(b, y), writes=(y,))
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
        ws = self._workspace(dy.shape[0], dy.dtype, extra_bytes=grads_bytes + away)
        if dx is not None:
            self._conv_pass(
                "backward data",
                K.conv2d_backward_data_direct,
                K.conv2d_backward_data_gemm,
                dx,
                dy,
                W,
                ws,
                K.conv3x3_backward_data,
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
                K.conv3x3_backward_filter,
            )
        if self.has_bias and self.needs_grad[2]:
            db = self.output((o,), dy.dtype)
            self.run(K.bias_grad_nchw, reads=(dy,), writes=(db,))
        return (dx, dW, db) if self.has_bias else (dx, dW)

    def _conv_pass(self, pass_name, direct, gemm, out, a, b, ws, padded):
        """Run one of the three convolution passes, out = f(a, b), with the gemm algorithm (or
        `padded`, the conv3x3 kernel) when there is a workspace and the direct one otherwise
        ("auto": the fastest of them)."""
        (sh, sw), (ph, pw), g = self.stride, self.padding, self.group

        # the workspace algorithms all take the workspace's array, so any can run in another's
        # place; under "auto", the first candidate is kept unless another is clearly faster
        # (_time_candidates)
        def by_planes(out_, ws_, a_, b_):
            padded(out_, a_, b_, ws_)

        def by_gemm(out_, ws_, a_, b_):
            gemm(out_, a_, b_, ws_, sh, sw, ph, pw)

        if self.algorithm == "conv3x3":
            self.run(by_planes, reads=(a, b), writes=(out, ws))
            return
        if ws is None:
            self.run(
                lambda out_, a_, b_: direct(out_, a_, b_, sh, sw, ph, pw, g),
                reads=(a, b),
                writes=(out,),
            )
            return
        if self.algorithm == "gemm":
            self.run(by_gemm, reads=(a, b), writes=(out, ws))
            return
        # each candidate that the workspace holds one sample of (the first candidate sized it)
        candidates = {"gemm": by_gemm} if ws.size() >= self._gemm_per_sample() else {}
        if self._conv3x3_fits(ws):
            planes = {"conv3x3": by_planes}
            first = self._conv3x3_first()
            candidates = {**planes, **candidates} if first else {**candidates, **planes}
        candidates["direct"] = lambda out_, ws_, a_, b_: direct(out_, a_, b_, sh, sw, ph, pw)
        key = (self.device.kind, pass_name, a.shape, b.shape, out.shape, ws.shape)
        key += (self.stride, self.padding, str(out.dtype))
        device = self.device

        def fastest(*arrays):
            if key not in BENCHMARKED:
                BENCHMARKED[key] = _time_candidates(device, candidates, arrays)
            candidates[BENCHMARKED[key]](*arrays)

        fastest.conv_algorithm = (pass_name, lambda: BENCHMARKED.get(key, "not run yet"))
        self.run(fastest, reads=(a, b), writes=(out, ws))

    def _conv3x3_first(self):
        """Is conv3x3 the first candidate of "auto" (the one it expects to keep, and sizes the
        workspace for): its geometry, at most CONV3X3_FIRST_UP_TO channels and filters, on a CPU
        (where the rule was measured) or on a planning device that plans a CPU's step."""
        c, o = self.geometry[0], self.geometry[3]
        cpu = self.device.plans_for == "cpu"
        return cpu and self._is_3x3() and max(c, o) <= CONV3X3_FIRST_UP_TO

    def _is_3x3(self):
        """Does conv3x3 apply to this geometry: 3x3 filters, stride 1, padding 1?"""
        kh, kw = self.geometry[4:]
        (sh, sw), (ph, pw) = self.stride, self.padding
        return sizes.conv3x3_applies(kh, kw, sh, sw, ph, pw)

    def _conv3x3_per_sample(self):
        """Workspace elements one sample needs in the conv3x3 passes."""
        c, h, w, o = self.geometry[:4]
        return sizes.conv3x3_workspace_per_sample(c, o, h, w)

    def _gemm_per_sample(self):
        """Workspace elements one sample needs in the gemm passes."""
        c, h, w, o, kh, kw = self.geometry
        (sh, sw), (ph, pw) = self.stride, self.padding
        return sizes.conv2d_gemm_workspace_per_sample(c, h, w, o, kh, kw, sh, sw, ph, pw)

    def _conv3x3_fits(self, ws):
        """Is conv3x3 a candidate: its geometry, and one sample's padded planes in `ws`? (A
        grouped convolution never gets here: it runs the direct kernels, with no workspace.)"""
        return self._is_3x3() and ws.size() >= self._conv3x3_per_sample()

    def _workspace(self, n, dtype, extra_bytes):
        """The workspace tensor, or None for the direct algorithm: the whole batch's for
        "gemm" and "conv3x3"; under "auto", as many samples of its first candidate's need as the
        free memory holds (conv3x3's planes where _conv3x3_first, else the gemm's columns).

        `extra_bytes` are the outputs still to be allocated at this step: the workspace must
        leave room for them."""
        if self.algorithm == "direct":
            return None
        per_sample = self._gemm_per_sample()
        if self.algorithm == "conv3x3" or (self.algorithm == "auto" and self._conv3x3_first()):
            per_sample = self._conv3x3_per_sample()
        itemsize = dtype.itemsize
        samples = n
        if self.algorithm == "auto":
            free = self.device.pool.stats()["largest_free_block"] - extra_bytes
            budget = min(free, WORKSPACE_LIMIT_BYTES)
            if self.device.workspace_limit is not None:  # offload="dyn" lowering workspaces
                budget = min(budget, self.device.workspace_limit)
            samples = min(n, max(budget, 0) // (per_sample * itemsize))
            if samples == 0:
                return None
        return self.output((samples * per_sample,), dtype)


#: Another algorithm replaces the first candidate only when it is this much faster: two that
#: time alike would otherwise be picked by the noise of the moment, and the choice (whose
#: numbers differ in the last bits) would change from one process to the next.
MARGIN = 0.8
#: On a CPU (and a planning device planning for one), the first candidate is conv3x3 where it
#: applies and the channels and filters are at most this many, gemm otherwise (and on a GPU,
#: where the rule is not measured). Measured on 2 cores (AVX-512), float32, GFLOP/s of the
#: three passes: conv3x3 beats gemm at 16-128 channels (ResNet-20's 64 channels of 8x8:
#: conv3x3 113-125, gemm 84-109), and gemm wins from 256 (8x8: conv3x3 118-134, gemm 153-169).
CONV3X3_FIRST_UP_TO = 128


def _time_candidates(device, candidates, arrays):
    """The name of the candidate to keep: the first, unless another takes less than MARGIN of
    its time on these arrays (timed by the device: Device.time_kernel)."""
    seconds = {name: device.time_kernel(run, arrays) for name, run in candidates.items()}
    first = next(iter(candidates))
    fastest = min(seconds, key=seconds.get)
    return fastest if seconds[fastest] < MARGIN * seconds[first] else first


def conv2d(x, W, b=None, stride=1, padding=0, algorithm="auto", group=1):
    """Functional form: conv2d(x, W, b, stride, padding)."""
    op = Conv2d(pair(stride), pair(padding), algorithm, group)
    return op(x, W) if b is None else op(x, W, b)


def pair(v):
    """(v, v) for one int, else the two given values: SINGA's kernel/stride/padding sizes."""
    return (v, v) if isinstance(v, int) else tuple(v)
