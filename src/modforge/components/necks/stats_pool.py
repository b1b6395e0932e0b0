"""``stats_pool`` — statistics pooling (Snyder et al., 2018, the x-vector): the mean and the
standard deviation of every feature over time, concatenated. It turns frame features of
any length into one vector and, unlike averaging alone, keeps how much each feature moves
(monotone pitch, smoothed spectra — what many spoofing artefacts change)."""

from __future__ import annotations

import torch

from ...core.constraints import PositiveFloat
from ...core.registries import register_neck
from ..base import Neck
from ..layouts import Layout


@register_neck("stats_pool")
class StatsPool(Neck):
    """Mean ‖ standard deviation over time.

    Args:
        in_dim: features per frame (wired by the builder).
        in_layout: 'sequence' ([B, T, D]) or 'channels' ([B, D, T]) (wired by the builder).
        eps: floor of the variance before the square root (keeps gradients finite on constant input).
    """

    accepts = (Layout.SEQUENCE, Layout.CHANNELS)
    produces = Layout.VECTOR
    out_dim_rule = "2 × in_dim (mean and standard deviation)"

    def __init__(self, in_dim: int, in_layout: Layout = Layout.SEQUENCE, eps: PositiveFloat = 1e-5):
        super().__init__()
        if eps <= 0:
            raise ValueError(f"eps must be positive, got {eps}")
        self.time_dim = 1 if Layout(in_layout) is Layout.SEQUENCE else 2
        self.eps = float(eps)
        self.out_dim = 2 * int(in_dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Mean ‖ std over time; with a padding ``mask`` ([B, T], True on real frames) over
        each row's real frames only."""
        if mask is not None:
            weights = mask.to(x.dtype).unsqueeze(-1 if self.time_dim == 1 else 1)
            count = weights.sum(dim=self.time_dim).clamp_min(1.0)
            mean = (x * weights).sum(dim=self.time_dim) / count
            centred = (x - mean.unsqueeze(self.time_dim)) * weights
            var = (centred * centred).sum(dim=self.time_dim) / count
            return torch.cat([mean, var.clamp(min=self.eps).sqrt()], dim=1)
        mean = x.mean(dim=self.time_dim)
        var = x.var(dim=self.time_dim, unbiased=False)
        return torch.cat([mean, var.clamp(min=self.eps).sqrt()], dim=1)
