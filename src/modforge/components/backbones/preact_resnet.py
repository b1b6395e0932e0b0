"""``preact_resnet18`` — ResNet-18 with pre-activation blocks (He et al., "Identity
Mappings in Deep Residual Networks", ECCV 2016): BatchNorm and ReLU come *before* each
convolution, and one final BatchNorm + ReLU follows the last stage.

Matches: the paper's full pre-activation unit (Section 4.1, Fig. 4(e)) with its extra
activation after the last unit (Appendix: "we adopt an extra activation right after its
element-wise addition" before pooling), on the CIFAR ResNet-18 layout of
kuangliu/pytorch-cifar ``models/preact_resnet.py`` (``PreActResNet18``) at 010536e: a 3×3
stem convolution (no BN, no bias), stages of 2-2-2-2 ``PreActBlock`` s (64-128-256-512
channels, stride 2 from the second stage on) whose projection shortcut is a 1×1 convolution
of the *pre-activated* input (no BN), PyTorch's default initialisation; kuangliu's
``avg_pool2d(out, 4)`` and ``linear`` are the image→vector adapter and the ``linear`` head.

kuangliu's network has no final BatchNorm + ReLU: ``post_activation=False`` is that network
exactly (the paper's rule is the default). The paper itself gives no ResNet-18 of this
width, and its authors' code is Lua Torch, so there are no released PyTorch weights to
match beyond kuangliu's layout.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ...core.constraints import PositiveFloat
from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout
from .resnet import widths


class PreActBlock(nn.Module):
    """``BN → ReLU → conv3×3 → BN → ReLU → conv3×3`` plus the (projected) input."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(x))
        skip = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(torch.relu(self.bn2(out)))
        return out + skip


@register_backbone("preact_resnet18")
class PreActResNet18(Backbone):
    """Pre-activation ResNet-18 (stages 2-2-2-2) with a 3×3 stem for small images.

    Args:
        in_dim: input channels (wired by the builder).
        width: multiplier on the 64-128-256-512 channel plan.
        post_activation: BatchNorm + ReLU after the last stage, as the paper (False:
            kuangliu/pytorch-cifar's PreActResNet18, which has none).
    """

    accepts = (Layout.IMAGE,)
    produces = Layout.IMAGE
    out_dim_rule = "512 × width channels"

    def __init__(self, in_dim: int, width: PositiveFloat = 1.0, post_activation: bool = True):
        super().__init__()
        planes = widths(width)
        self.stem = nn.Conv2d(in_dim, planes[0], 3, padding=1, bias=False)
        in_planes = planes[0]
        for i, out in enumerate(planes):
            stride = 1 if i == 0 else 2
            self.add_module(f"layer{i + 1}", nn.Sequential(PreActBlock(in_planes, out, stride), PreActBlock(out, out)))
            in_planes = out
        self.post = (
            nn.Sequential(nn.BatchNorm2d(in_planes), nn.ReLU(inplace=True)) if post_activation else nn.Identity()
        )
        self.out_dim = planes[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.post(x)
