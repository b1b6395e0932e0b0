"""``identity`` and ``global_avg_pool`` — the two necks every model family needs."""

from __future__ import annotations

from typing import Any

import torch

from ...core.registries import register_neck
from ..base import Neck
from ..layouts import Layout


@register_neck("identity")
class Identity(Neck):
    """Passes its input through unchanged (any layout).

    Args:
        in_dim: size of the input (wired by the builder).
    """

    out_dim_rule = "in_dim"

    def __init__(self, in_dim: Any):
        super().__init__()
        self.out_dim = in_dim

    def forward(self, x: Any) -> Any:
        return x


@register_neck("global_avg_pool")
class GlobalAvgPool(Neck):
    """Averages a feature map over its spatial/time axes into one vector per sample:
    over H, W for images; over T for sequences and channel-first maps; for multiscale
    inputs each level is pooled and the results are concatenated.

    Args:
        in_dim: channels (a list for multiscale; wired by the builder).
        in_layout: layout of the input (wired by the builder).

    Not scriptable by ``torch.jit.script``: it takes a tensor or (multiscale) a list of maps, chosen
    by ``in_layout`` at build time, which TorchScript cannot type statically. The ``torchscript``
    engine traces it instead, with a warning (see the engines table in the README).
    """

    accepts = (Layout.IMAGE, Layout.CHANNELS, Layout.SEQUENCE, Layout.MULTISCALE)
    produces = Layout.VECTOR
    out_dim_rule = "in_dim (the sum of the levels' channels for multiscale)"

    def __init__(self, in_dim: Any, in_layout: Layout = Layout.IMAGE):
        super().__init__()
        self.layout = Layout(in_layout)
        self.out_dim = sum(in_dim) if isinstance(in_dim, (list, tuple)) else int(in_dim)

    def forward(self, x: Any) -> torch.Tensor:
        if self.layout is Layout.MULTISCALE:
            return torch.cat([level.mean(dim=(2, 3)) for level in x], dim=1)
        if self.layout is Layout.IMAGE:
            return x.mean(dim=(2, 3))
        if self.layout is Layout.SEQUENCE:
            return x.mean(dim=1)
        return x.mean(dim=2)
