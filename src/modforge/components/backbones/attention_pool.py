"""``attention_pool_mlp`` — attention pooling over time, then a projection (the
AttentionBackend of DeepFense's documentation, as a built-in)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout


@register_backbone("attention_pool_mlp")
class AttentionPoolMLP(Backbone):
    """Score each frame with a small MLP, softmax over time, take the weighted mean of
    the frames, and project it (``Linear → ReLU → Linear``) to the embedding size.

    Args:
        in_dim: feature size of each frame (wired by the builder).
        attention_dim: hidden size of the frame scorer.
        embed_dim: output embedding size.
        dropout: dropout before the last projection.
    """

    accepts = (Layout.SEQUENCE,)
    produces = Layout.VECTOR
    out_dim_rule = "embed_dim"

    def __init__(
        self, in_dim: int, attention_dim: PositiveInt = 128, embed_dim: PositiveInt = 128, dropout: Probability = 0.0
    ):
        super().__init__()
        self.attention = nn.Sequential(nn.Linear(in_dim, attention_dim), nn.Tanh(), nn.Linear(attention_dim, 1))
        self.projection = nn.Sequential(
            nn.Linear(in_dim, embed_dim), nn.ReLU(inplace=True), nn.Dropout(dropout), nn.Linear(embed_dim, embed_dim)
        )
        self.out_dim = embed_dim

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The embedding ``[B, embed_dim]``; with a padding ``mask`` ([B, T], True on real
        frames) the attention covers each row's real frames only."""
        scores = self.attention(x)  # [B, T, 1]
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-1), float("-inf"))
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        weights = torch.softmax(scores, dim=1)
        return self.projection((x * weights).sum(dim=1))
