"""Mammoth's backbone example, as a modforge user writes it.

``@register_backbone('resnet') def resnet(depth: int, width: int = 1)`` — a function
registered as a backbone; ``depth`` is required, ``width`` optional with default 1, and
both become command-line flags. As in Mammoth, the backbone owns its classifier and
answers ``returnt`` = "out" / "features" / "both" / "full", so a model needs no head.
"""

import torch
import torch.nn as nn

from modforge import register_backbone
from modforge.components import Backbone, Layout


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


class ResNet(Backbone):
    """``depth`` basic blocks, ``16 * width`` channels, a linear classifier."""

    accepts = (Layout.IMAGE,)
    produces = Layout.VECTOR

    def __init__(self, depth: int, width: int, num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        channels = 16 * width
        self.stem = nn.Conv2d(in_channels, channels, 3, padding=1, bias=False)
        self.blocks = nn.ModuleList(BasicBlock(channels) for _ in range(depth))
        self.classifier = nn.Linear(channels, num_classes)
        self.out_dim = num_classes

    def forward(self, x: torch.Tensor, returnt: str = "out"):
        x = self.stem(x)
        layers = []
        for block in self.blocks:
            x = block(x)
            layers.append(x)
        feats = x.mean(dim=(2, 3))
        if returnt == "features":
            return feats
        out = self.classifier(feats)
        if returnt == "both":
            return out, feats
        if returnt == "full":
            return [*layers, out]
        return out


@register_backbone("resnet")
def resnet(depth: int, width: int = 1, num_classes: int = 10):
    return ResNet(depth, width, num_classes)
