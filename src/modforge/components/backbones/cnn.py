"""``cnn`` — a small convolutional network for small images (digits, CIFAR-sized)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout


@register_backbone("cnn")
class SmallCNN(Backbone):
    """``Conv → BatchNorm → ReLU → 2×2 max-pool`` blocks; outputs a feature map.

    Args:
        in_dim: input channels (wired by the builder).
        channels: output channels of each block, in order.
        kernel_size: convolution kernel size (odd).
        pool: halve the spatial size after each block (a 1×1 map stays 1×1).
        dropout: 2-D dropout after each block.
    """

    accepts = (Layout.IMAGE,)
    produces = Layout.IMAGE
    out_dim_rule = "the last of channels"

    def __init__(
        self,
        in_dim: int,
        channels: tuple[PositiveInt, ...] = (32, 64),
        kernel_size: PositiveInt = 3,
        pool: bool = True,
        dropout: Probability = 0.0,
    ):
        super().__init__()
        if not channels or any(c <= 0 for c in channels):
            raise ValueError(f"channels must be a non-empty list of positive sizes, got {tuple(channels)}")
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd to keep the map centred, got {kernel_size}")
        width = in_dim
        for i, out in enumerate(channels):
            layers: list[nn.Module] = [
                nn.Conv2d(width, out, kernel_size, padding=kernel_size // 2, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
            ]
            if pool:
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            if dropout > 0:
                layers.append(nn.Dropout2d(dropout))
            self.add_module(f"block{i + 1}", nn.Sequential(*layers))
            width = out
        self.out_dim = channels[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.children():
            x = block(x)
        return x
