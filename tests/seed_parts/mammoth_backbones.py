"""Mammoth's backbone-registration example, as a modforge user writes it.

``@register_backbone('resnet') def resnet(depth: int, width: int = 1)`` — a function
registered as a backbone, its arguments inferred from the signature: ``depth`` is
required, ``width`` optional with default 1; both become command-line flags.
"""

import torch
import torch.nn as nn

from modforge import register_backbone


class BasicBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(out)))


class ResNet(nn.Module):
    """A residual network of ``depth`` basic blocks, ``16 * width`` channels wide."""

    def __init__(self, depth: int, width: int, in_channels: int = 3):
        super().__init__()
        channels = 16 * width
        self.stem = nn.Conv2d(in_channels, channels, 3, padding=1, bias=False)
        self.blocks = nn.Sequential(*(BasicBlock(channels) for _ in range(depth)))
        self.out_dim = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(x)).mean(dim=(2, 3))


@register_backbone("resnet")
def resnet(depth: int, width: int = 1):
    return ResNet(depth, width)
