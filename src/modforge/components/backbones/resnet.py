"""``resnet18``, ``resnet34`` — residual networks of basic blocks (He et al., 2016).

Two stems: ``cifar`` (3×3 conv, stride 1, no max-pool — the variant used for 32×32 images
and by Mammoth's continual-learning benchmarks) and ``imagenet`` (7×7 conv, stride 2,
3×3 max-pool). Any number of input channels (``in_dim``) and a width multiplier on the
64-128-256-512 channel plan. With ``features_only=True`` the four stages' maps are
returned as a multiscale list (for ``fpn``).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn

from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout

Stem = Literal["cifar", "imagenet"]


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with a residual connection (projection when the shape changes)."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


def widths(width: float) -> list[int]:
    """The four stages' channel counts for a width multiplier."""
    if width <= 0:
        raise ValueError(f"width must be positive, got {width}")
    return [max(1, round(base * width)) for base in (64, 128, 256, 512)]


def make_stem(in_dim: int, planes: int, stem: Stem) -> nn.Sequential:
    """The input stem: 3×3/1 for small images, 7×7/2 + max-pool for large ones."""
    if stem == "cifar":
        return nn.Sequential(
            nn.Conv2d(in_dim, planes, 3, padding=1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(inplace=True)
        )
    return nn.Sequential(
        nn.Conv2d(in_dim, planes, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(planes),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
    )


class ResNet(Backbone):
    """A ResNet of :class:`BasicBlock` stages; outputs the last stage's feature map."""

    accepts = (Layout.IMAGE,)
    produces = Layout.IMAGE
    out_dim_rule = "512 × width channels (a list of the four stages' channels with features_only)"

    def __init__(
        self,
        in_dim: int,
        blocks: tuple[int, int, int, int],
        stem: Stem = "cifar",
        width: float = 1.0,
        features_only: bool = False,
        zero_init_residual: bool = False,
    ):
        super().__init__()
        planes = widths(width)
        self.stem = make_stem(in_dim, planes[0], stem)
        in_planes = planes[0]
        for i, (count, out) in enumerate(zip(blocks, planes, strict=True)):
            stride = 1 if i == 0 else 2
            layers = []
            for j in range(count):
                layers.append(BasicBlock(in_planes, out, stride if j == 0 else 1))
                in_planes = out
            self.add_module(f"layer{i + 1}", nn.Sequential(*layers))
        self.features_only = features_only
        first_stride = 1 if stem == "cifar" else 4
        self.out_strides = [first_stride * 2**i for i in range(4)]
        if features_only:
            self.produces = Layout.MULTISCALE
            self.out_dim = list(planes)
        else:
            self.out_dim = planes[-1]
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if zero_init_residual and isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    def forward(self, x: torch.Tensor):
        x = self.stem(x)
        maps = []
        for layer in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = layer(x)
            maps.append(x)
        return maps if self.features_only else x


_DOC_ARGS = """

    Args:
        in_dim: input channels (wired by the builder).
        stem: 'cifar' (3×3 conv, stride 1) for small images, 'imagenet' (7×7/2 + max-pool).
        width: multiplier on the 64-128-256-512 channel plan.
        features_only: return the four stages' maps as a multiscale list.
        zero_init_residual: start each block's last BatchNorm at zero (an identity block).
    """


def _variant(name: str, blocks: tuple[int, int, int, int], summary: str) -> type[ResNet]:
    """Register one depth of ResNet under ``name`` (timm's one-name-per-variant style)."""

    class Variant(ResNet):
        def __init__(
            self,
            in_dim: int,
            stem: Stem = "cifar",
            width: float = 1.0,
            features_only: bool = False,
            zero_init_residual: bool = False,
        ):
            super().__init__(in_dim, blocks, stem, width, features_only, zero_init_residual)

    class_name = name.replace("resnet", "ResNet")
    Variant.__name__ = Variant.__qualname__ = class_name
    Variant.__doc__ = summary + _DOC_ARGS
    return register_backbone(name)(Variant)


ResNet18 = _variant("resnet18", (2, 2, 2, 2), "ResNet-18: basic blocks in stages of 2-2-2-2.")
ResNet34 = _variant("resnet34", (3, 4, 6, 3), "ResNet-34: basic blocks in stages of 3-4-6-3.")
