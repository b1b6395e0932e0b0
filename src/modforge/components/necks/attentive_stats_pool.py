"""``attentive_stats_pool`` — attentive statistics pooling (Okabe et al., 2018), with
ECAPA-TDNN's global context (Desplanques et al., 2020): frame weights from an
attention layer, then the weighted mean and standard deviation, concatenated."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...core.constraints import PositiveInt
from ...core.registries import register_neck
from ..base import Neck
from ..layouts import Layout


@register_neck("attentive_stats_pool")
class AttentiveStatsPool(Neck):
    """Per-channel attention over time → weighted mean ‖ weighted std.

    Args:
        in_dim: channels C (wired by the builder).
        in_layout: 'channels' ([B, C, T]) or 'sequence' ([B, T, C]) (wired by the builder).
        attention_dim: hidden size of the attention layer.
        global_context: also feed the utterance-level mean and std to the attention
            (ECAPA-TDNN's variant).
    """

    accepts = (Layout.CHANNELS, Layout.SEQUENCE)
    produces = Layout.VECTOR
    out_dim_rule = "2 × in_dim (mean and standard deviation)"

    def __init__(
        self,
        in_dim: int,
        in_layout: Layout = Layout.CHANNELS,
        attention_dim: PositiveInt = 128,
        global_context: bool = True,
    ):
        super().__init__()
        self.channel_first = Layout(in_layout) is Layout.CHANNELS
        self.eps = 1e-6  # floor of the variance (an instance attribute, so TorchScript compiles the neck)
        self.global_context = global_context
        width = in_dim * 3 if global_context else in_dim
        self.attention = nn.Sequential(
            nn.Conv1d(width, attention_dim, 1),
            nn.ReLU(inplace=True),
            nn.BatchNorm1d(attention_dim),
            nn.Tanh(),
            nn.Conv1d(attention_dim, in_dim, 1),
        )
        self.out_dim = 2 * in_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.channel_first:
            x = x.transpose(1, 2)
        if self.global_context:
            mean = x.mean(dim=2, keepdim=True).expand_as(x)
            std = x.var(dim=2, keepdim=True, unbiased=False).clamp(min=self.eps).sqrt().expand_as(x)
            scores = self.attention(torch.cat([x, mean, std], dim=1))
        else:
            scores = self.attention(x)
        weights = torch.softmax(scores, dim=2)
        mean = (weights * x).sum(dim=2)
        std = ((weights * x * x).sum(dim=2) - mean * mean).clamp(min=self.eps).sqrt()
        return torch.cat([mean, std], dim=1)
