"""``fpn`` — Feature Pyramid Network (Lin et al., 2017): multiscale in, multiscale out."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import PositiveInt
from ...core.registries import register_neck
from ..base import Neck
from ..layouts import Layout


@register_neck("fpn")
class FPN(Neck):
    """Lateral 1×1 convolutions bring every level to ``out_channels``; a top-down pass adds
    each coarser level (nearest-upsampled) to the finer one; a 3×3 convolution smooths
    each sum. Levels keep their resolutions.

    Args:
        in_dim: channels of each input level, finest first (wired by the builder).
        out_channels: channels of every output level.

    Not scriptable by ``torch.jit.script``: it zips its per-level convolutions with a list of maps
    whose length TorchScript cannot know statically. The ``torchscript`` engine traces it instead,
    with a warning (see the engines table in the README).
    """

    accepts = (Layout.MULTISCALE,)
    produces = Layout.MULTISCALE
    out_dim_rule = "out_channels for each input level"

    def __init__(self, in_dim: list[int], out_channels: PositiveInt = 256):
        super().__init__()
        if isinstance(in_dim, int) or not in_dim:
            raise ValueError(f"fpn needs a list of channel counts (a multiscale input), got {in_dim!r}")
        self.lateral = nn.ModuleList(nn.Conv2d(c, out_channels, 1) for c in in_dim)
        self.smooth = nn.ModuleList(nn.Conv2d(out_channels, out_channels, 3, padding=1) for _ in in_dim)
        self.out_dim = [out_channels] * len(in_dim)

    def forward(self, levels: list[torch.Tensor]) -> list[torch.Tensor]:
        if len(levels) != len(self.lateral):
            raise ValueError(f"expected {len(self.lateral)} levels, got {len(levels)}")
        laterals = [conv(level) for conv, level in zip(self.lateral, levels, strict=True)]
        for i in range(len(laterals) - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(
                laterals[i], size=laterals[i - 1].shape[-2:], mode="nearest"
            )
        return [conv(level) for conv, level in zip(self.smooth, laterals, strict=True)]
