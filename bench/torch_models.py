"""The benchmark's nets written in PyTorch, layer for layer as in nnmem.models, and what one
PyTorch training step allocates (bench only)."""

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile


class CNN(nn.Module):
    def __init__(self, num_channels=1, num_classes=10):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(num_channels, 20, 5), nn.Conv2d(20, 50, 5)
        self.linear1, self.linear2 = nn.LazyLinear(500), nn.Linear(500, num_classes)

    def forward(self, x):
        y = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        y = torch.max_pool2d(torch.relu(self.conv2(y)), 2)
        return self.linear2(torch.relu(self.linear1(torch.flatten(y, 1))))


class BasicBlock(nn.Module):
    def __init__(self, cin, c, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != c:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c)
            )

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, depth=20, num_channels=3, num_classes=10):
        super().__init__()
        n = (depth - 2) // 6
        layers, cin = (
            [nn.Conv2d(num_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()],
            16,
        )
        for stage, c in enumerate((16, 32, 64)):
            for i in range(n):
                layers.append(BasicBlock(cin, c, 2 if stage and i == 0 else 1))
                cin = c
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def _bn_relu_conv(cin, cout, size):
    """nnmem.models.densenet's BatchNorm -> ReLU -> convolution (no bias, same padding)."""
    return nn.Sequential(
        nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, cout, size, 1, size // 2, bias=False)
    )


class DenseBlock(nn.Module):
    """Layer i reads cat(x, out_0, ..., out_{i-1}); the output joins them all."""

    def __init__(self, cin, num_layers, growth):
        super().__init__()
        self.layers = nn.ModuleList(
            _bn_relu_conv(cin + i * growth, growth, 3) for i in range(num_layers)
        )
        self.out_channels = cin + num_layers * growth

    def forward(self, x):
        features, joined = [x], x
        for dense in self.layers:
            features.append(dense(joined))
            joined = torch.cat(features, 1)  # a new, longer copy each time, as nnmem's Cat
        return joined


class DenseNet(nn.Module):
    """nnmem.models.densenet.DenseNet: a 3x3 stem of 2 * growth channels, dense blocks joined
    by BatchNorm -> ReLU -> 1x1 convolution -> 2x2 average pool, then BatchNorm, ReLU, global
    average pooling and a Linear layer."""

    def __init__(self, growth=12, layers_per_block=4, blocks=3, num_channels=3, num_classes=10):
        super().__init__()
        c = 2 * growth
        layers = [nn.Conv2d(num_channels, c, 3, 1, 1, bias=False)]
        for b in range(blocks):
            layers.append(DenseBlock(c, layers_per_block, growth))
            c = layers[-1].out_channels
            if b + 1 < blocks:
                layers += [_bn_relu_conv(c, c, 1), nn.AvgPool2d(2)]
        layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.net = nn.Sequential(*layers, nn.Linear(c, num_classes))

    def forward(self, x):
        return self.net(x)


def build(name, num_channels=1, depth=20, hidden=(256, 256)):
    """The twin of nnmem.models.create_model(name, ...) for the benchmark's nets (the zoo
    DenseNet with its default growth 12, 4 layers per block, 3 blocks)."""
    if name == "densenet":
        return DenseNet(num_channels=num_channels)
    if name == "mlp":
        layers, width = [nn.Flatten()], 784
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        return nn.Sequential(*layers, nn.Linear(width, 10))
    if name == "cnn":
        net = CNN(num_channels)
        net(torch.zeros(1, num_channels, 28, 28))  # materialise the lazy Linear
        return net
    return ResNet(depth, num_channels)


# -- BERT-base and GPT-2 small, node for node as nnmem.sonnx.architectures writes them --------
# Every linear layer is ``x @ W + b`` with W stored (in, out) (the ONNX MatMul then Add); the
# heads are split by reshape and transpose and attention is spelled out, softmax(q k^T / sqrt(d))
# v, with no fused (flash / scaled_dot_product) kernel; each GELU is the elementary operators
# the exporter writes. So autograd saves, operator for operator, what the ONNX graph's
# operators need for backward. The output heads are tied to the token embedding.


class _Linear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) / n_in**0.5)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


def _attention(q, k, v, heads, mask=None):
    """architectures._attention: (N, S, hidden) q, k, v -> (N, S, hidden)."""
    n, s, hidden = q.shape
    d = hidden // heads
    q = q.reshape(n, s, heads, d).transpose(1, 2)  # Transpose perm (0, 2, 1, 3)
    k = k.reshape(n, s, heads, d).permute(0, 2, 3, 1)  # perm (0, 2, 3, 1)
    v = v.reshape(n, s, heads, d).transpose(1, 2)
    scores = (q @ k) / d**0.5
    if mask is not None:  # Where(mask, scores, float32 min)
        scores = torch.where(mask, scores, torch.finfo(torch.float32).min)
    context = torch.softmax(scores, dim=-1) @ v
    return context.transpose(1, 2).reshape(n, s, hidden)


def _gelu_erf(x):
    return x * (torch.erf(x / 2**0.5) + 1.0) * 0.5


def _gelu_tanh(x):
    inner = x + 0.044715 * torch.pow(x, 3.0)
    return 0.5 * x * (1.0 + torch.tanh((2 / torch.pi) ** 0.5 * inner))


class BertLayer(nn.Module):
    """Post-LN: x = LN(x + attention(x) W_o); x = LN(x + GELU(x W_1) W_2)."""

    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (_Linear(hidden, hidden) for _ in range(3))
        self.attention_output = _Linear(hidden, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
        self.up, self.down = _Linear(hidden, intermediate), _Linear(intermediate, hidden)

    def forward(self, x):
        a = _attention(self.query(x), self.key(x), self.value(x), self.heads)
        x = self.ln1(self.attention_output(a) + x)
        return self.ln2(self.down(_gelu_erf(self.up(x))) + x)


class Bert(nn.Module):
    """architectures.bert: BertForMaskedLM, input_ids (N, S) -> logits (N, S, vocab)."""

    def __init__(self, layers=12, hidden=768, heads=12, intermediate=3072, vocab=30522,
                 sequence=128, positions=512):  # fmt: skip
        super().__init__()
        self.word = nn.Parameter(torch.randn(vocab, hidden) * 0.02)
        self.position = nn.Parameter(torch.randn(positions, hidden) * 0.02)
        self.segment = nn.Parameter(torch.randn(2, hidden) * 0.02)
        self.register_buffer("position_ids", torch.arange(sequence)[None])
        self.register_buffer("segment_ids", torch.zeros(1, sequence, dtype=torch.int64))
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, intermediate) for _ in range(layers))
        self.transform = _Linear(hidden, hidden)
        self.transform_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids):
        place = nn.functional.embedding(self.position_ids, self.position)
        segment = nn.functional.embedding(self.segment_ids, self.segment)
        x = self.ln(nn.functional.embedding(ids, self.word) + place + segment)
        for layer in self.layers:
            x = layer(x)
        x = self.transform_ln(_gelu_erf(self.transform(x)))
        return x @ self.word.t() + self.bias


class GPT2Block(nn.Module):
    """Pre-LN: x = x + attention(LN(x)) W_o with one fused QKV; x = x + GELU(LN(x) W_fc) W_proj."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-5), nn.LayerNorm(hidden, eps=1e-5)
        self.qkv, self.proj = _Linear(hidden, 3 * hidden), _Linear(hidden, hidden)
        self.fc, self.fc_proj = _Linear(hidden, 4 * hidden), _Linear(4 * hidden, hidden)

    def forward(self, x, mask):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=2)  # Split, num_outputs=3
        x = self.proj(_attention(q, k, v, self.heads, mask)) + x
        return self.fc_proj(_gelu_tanh(self.fc(self.ln2(x)))) + x


class GPT2(nn.Module):
    """architectures.gpt2: GPT2LMHeadModel, input_ids (N, S) -> logits (N, S, vocab)."""

    def __init__(self, layers=12, hidden=768, heads=12, vocab=50257, sequence=1024,
                 positions=1024):  # fmt: skip
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, hidden) * 0.02)
        self.wpe = nn.Parameter(torch.randn(positions, hidden) * 0.01)
        self.register_buffer("position_ids", torch.arange(sequence)[None])
        causal = torch.ones(sequence, sequence, dtype=torch.bool).tril()[None, None]
        self.register_buffer("mask", causal)  # one constant, read by every layer
        self.blocks = nn.ModuleList(GPT2Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, ids):
        x = nn.functional.embedding(ids, self.wte)
        x = x + nn.functional.embedding(self.position_ids, self.wpe)
        for block in self.blocks:
            x = block(x, self.mask)
        return self.ln_f(x) @ self.wte.t()


# -- what one training step allocates -----------------------------------------------------------
def step_memory(net, x, y, batches):
    """For each b in `batches`: one training step of `net` on x[:b], y[:b] (forward,
    cross-entropy, backward, SGD with momentum 0.9), as {"peak_bytes", "peak_at", "saved"}.

    peak_bytes: the most bytes the step holds at once beyond what lives across steps (the
    parameters and buffers, the momentum, made by a warm-up step on one sample, and the batch),
    the logits and the loss left out from their allocation on: the c10 CPU allocator's count of
    live bytes, which the profiler reports with each of its [memory] events (exact, under the
    allocator's lock; not RSS). The gradients are set to None before the step, so the weight
    gradients are allocated in it and counted until its end, as PyTorch's `.grad` holds them.
    peak_at: "forward", "backward (<autograd node>)" or "optimizer" and the allocating operator.
    saved: the bytes of the storages autograd saves for backward, each storage once at its
    nbytes, by what they hold ("activations", "parameters", "buffers", "batch")."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t  # kept, as autograd keeps it: two storages seen never share an address

    def step(b):
        optimizer.zero_grad(set_to_none=True)
        seen.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = net(x[:b])
            loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y[:b].reshape(-1))
        loss.backward()
        optimizer.step()
        return out, loss

    net.train()
    step(1)  # the momentum buffers: made by the first step, they live across steps
    rows = []
    for b in batches:
        optimizer.zero_grad(set_to_none=True)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            results = step(b)
        peak_bytes, peak_at = _peak(_allocations(prof), results)
        rows.append({"batch": b, "peak_bytes": peak_bytes, "peak_at": peak_at})
        rows[-1]["saved"] = _saved_by_kind(seen, net, x, y)
        del results
    return rows


def _allocations(prof):
    """The profile's allocation events (each carries the allocator's live total), in time
    order."""
    found, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if isinstance(event.extra_fields, torch._C._profiler._ExtraFields_Allocation):
            found.append(event)
        stack.extend(event.children)
    return sorted(found, key=lambda e: e.start_time_ns)


def _peak(events, results):
    """(the most live bytes over `events`, less the `results` tensors once allocated; where)."""
    start = events[0].extra_fields
    base = start.total_allocated - start.alloc_size  # blocks of an earlier profile, still live
    sizes = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in results}
    made = {}  # a result's address -> the index of its (last) allocation
    for i, event in enumerate(events):
        if sizes.get(event.extra_fields.ptr) == event.extra_fields.alloc_size:
            made[event.extra_fields.ptr] = i
    peak, at = 0, None
    for i, event in enumerate(events):
        held = sum(sizes[ptr] for ptr, j in made.items() if j <= i)
        live = event.extra_fields.total_allocated - base - held
        if live > peak:
            peak, at = live, event
    return peak, _phase(at)


def _phase(event):
    names = []
    while event is not None:
        names.append(event.name)
        event = event.parent
    operator = next((n for n in names[1:] if n.startswith("aten::")), names[-1])
    for name in names:
        if name.startswith("autograd::engine::evaluate_function: "):
            return f"backward ({name.split(': ', 1)[1]}, {operator})"
        if name.startswith("Optimizer.step"):
            return f"optimizer ({operator})"
    return f"forward ({names[-1]})"


def _saved_by_kind(seen, net, x, y):
    kinds = {p.untyped_storage().data_ptr(): "parameters" for p in net.parameters()}
    kinds.update({b.untyped_storage().data_ptr(): "buffers" for b in net.buffers()})
    kinds.update({t.untyped_storage().data_ptr(): "batch" for t in (x, y)})
    counted = dict.fromkeys(("activations", "parameters", "buffers", "batch"), 0)
    for address, nbytes in seen.items():
        counted[kinds.get(address, "activations")] += nbytes
    return counted


def step_flops(step):
    """Floating-point operations of one call of `step` (a training step), as PyTorch's
    FlopCounterMode counts them: convolutions and matrix products, forward and backward, 2 per
    multiply-add (the step runs once)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()
