"""PyTorch beside nnmem on the GPU (bench only): ResNet-50 at 224x224 written layer for layer as
nnmem.models.resnet builds it (torchvision's "v1.5": the bottleneck strides in its 3x3
convolution; no torchvision needed), a training step in float32 or with PyTorch's automatic
mixed precision, and the largest batch PyTorch trains in the GPU's memory.

On a GPU every step is PyTorch's default eager mode on "cuda"; with --smoke, the same code on
the CPU (its memory counters are CUDA's alone, so peaks are None there).
"""

import gc

import torch
from torch import nn
from torch_models import build as build_twin
from train import LR, MOMENTUM, WEIGHT_DECAY


class Bottleneck(nn.Module):
    """nnmem.models.resnet.Bottleneck: 1x1, 3x3 (strided), 1x1 to 4x the channels."""

    def __init__(self, cin, c, stride):
        super().__init__()
        cout = 4 * c
        self.body = nn.Sequential(
            nn.Conv2d(cin, c, 1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(),
            nn.Conv2d(c, c, 3, stride, 1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(),
            nn.Conv2d(c, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet50(num_classes=10):
    """nnmem's create_model("resnet", depth=50, stem="imagenet"): the 7x7/2 stem and its 3x3/2
    max pool, stages of 3, 4, 6 and 3 bottleneck blocks, global average pooling, Linear."""
    layers = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for stage, (c, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
        for i in range(blocks):
            layers.append(Bottleneck(cin, c, 2 if stage and i == 0 else 1))
            cin = 4 * c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


def target(smoke):
    return torch.device("cpu" if smoke else "cuda")


def synchronize(smoke):
    if not smoke:
        torch.cuda.synchronize()


def twin(case):
    """The PyTorch net of a gpu.py case (bench/torch_models.py's, or ResNet-50 above)."""
    if case["model"] == "resnet" and case["kwargs"].get("stem") == "imagenet":
        return resnet50()
    return build_twin(case["model"], **case["kwargs"])


def training_step(net, batch, shape, smoke, precision="float32", seed=0):
    """A function running one SGD step of `net` (moved to the target) on a fixed random batch:
    float32, or precision="float16": torch.autocast (float16) with a GradScaler, PyTorch's
    automatic mixed precision."""
    gpu = target(smoke)
    torch.manual_seed(seed)
    net = net.to(gpu)
    sgd = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    x = torch.rand((batch,) + tuple(shape), device=gpu)
    y = torch.randint(0, 10, (batch,), device=gpu)
    loss_fn = nn.CrossEntropyLoss()
    if precision == "float32":

        def step():
            sgd.zero_grad()
            loss_fn(net(x), y).backward()
            sgd.step()

        return step
    scaler = torch.amp.GradScaler(gpu.type)

    def mixed_step():
        sgd.zero_grad()
        with torch.autocast(gpu.type, dtype=torch.float16):
            loss = loss_fn(net(x), y)
        scaler.scale(loss).backward()
        scaler.step(sgd)
        scaler.update()

    return mixed_step


def peak_bytes(smoke):
    return None if smoke else torch.cuda.max_memory_allocated()


def reset_peak(smoke):
    if not smoke:
        torch.cuda.reset_peak_memory_stats()


def step_peak(batch, shape, smoke):
    """The peak bytes of a ResNet-50 training step at `batch` (its second step: the first
    makes the gradients and the momentum), or None without CUDA."""
    step = training_step(resnet50(), batch, shape, smoke)
    step()
    synchronize(smoke)
    reset_peak(smoke)
    step()
    synchronize(smoke)
    return peak_bytes(smoke)


def largest_batch(shape, smoke, small=32, tries=3):
    """PyTorch's largest ResNet-50 batch without checkpointing: the peaks at `small` and
    2 * `small` taken as a line in the batch, the batch where it meets the memory PyTorch can
    have (free after emptying its cache, plus what it holds), then one real step there, and
    5% less after each out-of-memory error. {"predicted", "confirmed" (None if every try ran
    out of memory), "tried"}."""
    a, b = step_peak(small, shape, smoke), step_peak(2 * small, shape, smoke)
    if smoke:  # no memory counters: the code path, at a tiny batch
        predicted = small + 1
    else:
        gc.collect()  # the two nets above
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
        available = free + torch.cuda.memory_allocated()
        predicted = int(small + (available - a) / ((b - a) / small))
    out = {"peak_small": a, "peak_double": b, "predicted": predicted, "tried": []}
    batch = predicted
    for _ in range(tries):
        out["tried"].append(batch)
        try:
            training_step(resnet50(), batch, shape, smoke)()
            synchronize(smoke)
            out["confirmed"] = batch
            return out
        except torch.OutOfMemoryError:
            pass
        gc.collect()  # the failed step's tensors, freed once the exception is gone
        if not smoke:
            torch.cuda.empty_cache()
        batch = int(batch * 0.95)
    out["confirmed"] = None
    return out
