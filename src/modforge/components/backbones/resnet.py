"""``resnet18``, ``resnet34`` — residual networks of basic blocks (He et al., 2016).

Matches: pytorch/vision ``torchvision/models/resnet.py`` (``resnet18``/``resnet34``; read at
054e54c — later releases changed how weights are requested, not the basic-block network)
with ``stem="imagenet"``:
conv 7×7/2 (padding 3, no bias) → BN → ReLU → max-pool 3/2 (padding 1, floor mode), four
stages of basic blocks (``conv3×3 → BN → ReLU → conv3×3 → BN``, plus the input or a
``conv1×1/stride → BN`` projection, then ReLU; the stride on the first block's first
convolution), BatchNorm eps 1e-5 and momentum 0.1, Kaiming-normal (fan-out) convolution
weights and ``zero_init_residual`` as torchvision's. torchvision's ``avgpool`` → ``fc`` is
modforge's image→vector adapter (the mean over H and W) and ``linear`` head, so a
torchvision ``state_dict`` loads exactly after :func:`torchvision_resnet_state_dict` and
gives the same logits (tested against the torchvision forward, written out in plain
PyTorch).

Beyond torchvision (extensions, not deviations at the defaults above): a ``cifar`` stem
(3×3 conv, stride 1, no max-pool — the variant used for 32×32 images and by Mammoth's
continual-learning benchmarks, and this module's default stem), any number of input
channels (``in_dim``), a width multiplier on the 64-128-256-512 channel plan, and
``features_only=True``, which returns the four stages' maps as a multiscale list (for
``fpn``). Remaining difference: the classifier layer is the ``linear`` head's (PyTorch's
default ``nn.Linear`` initialisation, as torchvision's ``fc``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

import torch
import torch.nn as nn

from ...core.constraints import PositiveFloat
from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout

__all__ = ["BasicBlock", "ResNet", "ResNet18", "ResNet34", "torchvision_resnet_state_dict", "widths"]

Stem = Literal["cifar", "imagenet"]
ConvInit = Literal["kaiming_fan_out", "pytorch"]
DEPTHS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}


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
    """A ResNet of :class:`BasicBlock` stages; outputs the last stage's feature map.

    Not scriptable by ``torch.jit.script``: its forward returns a tensor or, with ``features_only``,
    a list of maps — one type per build, which TorchScript cannot type statically. The
    ``torchscript`` engine traces it instead, with a warning (see the engines table in the README).
    """

    accepts = (Layout.IMAGE,)
    produces = Layout.IMAGE
    out_dim_rule = "512 × width channels (a list of the four stages' channels with features_only)"

    def __init__(
        self,
        in_dim: int,
        blocks: tuple[int, int, int, int],
        stem: Stem = "cifar",
        width: PositiveFloat = 1.0,
        features_only: bool = False,
        zero_init_residual: bool = False,
        conv_init: ConvInit = "kaiming_fan_out",
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
            if isinstance(m, nn.Conv2d) and conv_init == "kaiming_fan_out":
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
        conv_init: 'kaiming_fan_out' (torchvision's) or 'pytorch' (PyTorch's default, as Mammoth's
            ResNet-18 leaves its convolutions).
    """


def _variant(name: str, blocks: tuple[int, int, int, int], summary: str) -> type[ResNet]:
    """Register one depth of ResNet under ``name`` (timm's one-name-per-variant style)."""

    class Variant(ResNet):
        def __init__(
            self,
            in_dim: int,
            stem: Stem = "cifar",
            width: PositiveFloat = 1.0,
            features_only: bool = False,
            zero_init_residual: bool = False,
            conv_init: ConvInit = "kaiming_fan_out",
        ):
            super().__init__(in_dim, blocks, stem, width, features_only, zero_init_residual, conv_init)

    class_name = name.replace("resnet", "ResNet")
    Variant.__name__ = Variant.__qualname__ = class_name
    Variant.__doc__ = summary + _DOC_ARGS
    return register_backbone(name)(Variant)


ResNet18 = _variant("resnet18", DEPTHS[18], "ResNet-18: basic blocks in stages of 2-2-2-2.")
ResNet34 = _variant("resnet34", DEPTHS[34], "ResNet-34: basic blocks in stages of 3-4-6-3.")

_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
_OPTIONAL = "num_batches_tracked"  # absent from torchvision's older weights; BatchNorm fills it in (0)
_TORCHVISION_KEY = re.compile(r"layer([1-4])\.(\d+)\.(conv1|bn1|conv2|bn2|downsample\.0|downsample\.1)\.(\w+)")


def _torchvision_keys(depth: int) -> list[str]:
    """Every key of a torchvision ``resnet18``/``resnet34`` state dict (``fc`` included)."""
    keys = ["conv1.weight", *(f"bn1.{n}" for n in _BN)]
    for stage, count in enumerate(DEPTHS[depth], start=1):
        for block in range(count):
            prefix = f"layer{stage}.{block}."
            keys += [prefix + "conv1.weight", *(prefix + f"bn1.{n}" for n in _BN)]
            keys += [prefix + "conv2.weight", *(prefix + f"bn2.{n}" for n in _BN)]
            if block == 0 and stage > 1:
                keys += [prefix + "downsample.0.weight", *(prefix + f"downsample.1.{n}" for n in _BN)]
    return keys + ["fc.weight", "fc.bias"]


def torchvision_resnet_state_dict(
    state: Mapping[str, torch.Tensor],
    depth: int,
    *,
    backbone_prefix: str = "parts.backbone.",
    head_prefix: str | None = "parts.head.",
) -> dict[str, torch.Tensor]:
    """A torchvision ``resnet18``/``resnet34`` ``state_dict`` under modforge's keys.

    ``conv1`` → ``stem.0``, ``bn1`` → ``stem.1``, ``layerN.i.{conv1, bn1, conv2, bn2}`` unchanged,
    ``layerN.i.downsample.{0, 1}`` → ``layerN.i.shortcut.{0, 1}``, all under ``backbone_prefix``;
    ``fc`` → ``fc`` under ``head_prefix`` (the ``linear`` head), or left out when
    ``head_prefix`` is None. The defaults fit
    ``build_model({"backbone": {"type": "resnet18", "args": {"stem": "imagenet"}}, "head": "linear"},
    in_dim=3, num_classes=1000, ...)``; ``backbone_prefix=""``, ``head_prefix=None`` fit a bare
    backbone. ``num_batches_tracked`` entries may be absent (torchvision's older weights have
    none; BatchNorm then starts it at 0).

    Args:
        state: the torchvision state dict (no ``module.`` prefix).
        depth: 18 or 34.

    Raises:
        ValueError: naming the keys it cannot map (not those of a torchvision ResNet of that
            depth) and the keys such a state dict must have but lacks; nothing is guessed.
    """
    if depth not in DEPTHS:
        raise ValueError(f"torchvision_resnet_state_dict: depth must be 18 or 34, got {depth}")
    expected = _torchvision_keys(depth)
    known = set(expected)
    unmapped = [k for k in state if k not in known]
    missing = [k for k in expected if k not in state and not k.endswith(_OPTIONAL)]
    if unmapped or missing:
        problems = []
        if unmapped:
            problems.append(
                f"{len(unmapped)} unmapped (not in a torchvision resnet{depth}): " + ", ".join(unmapped[:10])
            )
        if missing:
            problems.append(f"{len(missing)} missing: " + ", ".join(missing[:10]))
        raise ValueError("torchvision_resnet_state_dict: " + "; ".join(problems))
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        module, _, name = key.partition(".")
        if module == "fc":
            if head_prefix is not None:
                out[f"{head_prefix}fc.{name}"] = value
            continue
        if module in ("conv1", "bn1"):
            out[f"{backbone_prefix}stem.{0 if module == 'conv1' else 1}.{name}"] = value
            continue
        match = _TORCHVISION_KEY.fullmatch(key)
        assert match is not None  # every other expected key is a block's
        stage, block, layer, name = match.groups()
        layer = layer.replace("downsample", "shortcut")
        out[f"{backbone_prefix}layer{stage}.{block}.{layer}.{name}"] = value
    return out
