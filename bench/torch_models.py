"""The benchmark's nets written in PyTorch, layer for layer as in nnmem.models (bench only)."""

import torch
from torch import nn


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


def build(name, num_channels=1, depth=20, hidden=(256, 256)):
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
