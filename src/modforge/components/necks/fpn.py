"""``fpn`` — Feature Pyramid Network (Lin et al., 2017): multiscale in, multiscale out; with
``start_level``/``extra_levels`` the P3–P7 pyramid one-stage detectors use (RetinaNet, FCOS)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import NonNegativeInt, PositiveInt
from ...core.registries import register_neck
from ..base import Neck
from ..layouts import Layout


@register_neck("fpn")
class FPN(Neck):
    """Lateral 1×1 convolutions bring every level to ``out_channels``; a top-down pass adds
    each coarser level (nearest-upsampled) to the finer one; a 3×3 convolution smooths
    each sum. Levels keep their resolutions.

    Detectors drop the finest input level and add coarser ones: ``start_level: 1,
    extra_levels: 2`` on a ResNet's four stages (strides 4–32) gives P3–P7 (strides 8–128),
    the extra levels being 3×3 stride-2 convolutions on the previous output with a ReLU before
    each but the first (FCOS; mmdet's ``add_extra_convs="on_output"``,
    ``relu_before_extra_convs=True``).

    Args:
        in_dim: channels of each input level, finest first (wired by the builder).
        out_channels: channels of every output level.
        start_level: input levels to skip, finest first (1 drops a ResNet's stride-4 C2).
        extra_levels: stride-2 levels added after the coarsest one.

    Not scriptable by ``torch.jit.script``: it zips its per-level convolutions with a list of maps
    whose length TorchScript cannot know statically. The ``torchscript`` engine traces it instead,
    with a warning (see the engines table in the README).
    """

    accepts = (Layout.MULTISCALE,)
    produces = Layout.MULTISCALE
    out_dim_rule = "out_channels for each input level from start_level, plus extra_levels"

    def __init__(
        self,
        in_dim: list[int],
        out_channels: PositiveInt = 256,
        start_level: NonNegativeInt = 0,
        extra_levels: NonNegativeInt = 0,
    ):
        super().__init__()
        if isinstance(in_dim, int) or not in_dim:
            raise ValueError(f"fpn needs a list of channel counts (a multiscale input), got {in_dim!r}")
        if start_level >= len(in_dim):
            raise ValueError(f"start_level ({start_level}) must leave at least one of the {len(in_dim)} input levels")
        self.num_inputs, self.start_level = len(in_dim), start_level
        used = in_dim[start_level:]
        self.lateral = nn.ModuleList(nn.Conv2d(c, out_channels, 1) for c in used)
        self.smooth = nn.ModuleList(nn.Conv2d(out_channels, out_channels, 3, padding=1) for _ in used)
        self.extra = nn.ModuleList(nn.Conv2d(out_channels, out_channels, 3, stride=2, padding=1) for _ in range(extra_levels))
        self.out_dim = [out_channels] * (len(used) + extra_levels)

    def forward(self, levels: list[torch.Tensor]) -> list[torch.Tensor]:
        if len(levels) != self.num_inputs:
            raise ValueError(f"expected {self.num_inputs} levels, got {len(levels)}")
        laterals = [conv(level) for conv, level in zip(self.lateral, levels[self.start_level :], strict=True)]
        for i in range(len(laterals) - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(
                laterals[i], size=laterals[i - 1].shape[-2:], mode="nearest"
            )
        outs = [conv(level) for conv, level in zip(self.smooth, laterals, strict=True)]
        for i, conv in enumerate(self.extra):
            outs.append(conv(outs[-1] if i == 0 else F.relu(outs[-1])))
        return outs
