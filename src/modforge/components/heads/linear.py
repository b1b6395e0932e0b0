"""``linear`` — one fully connected layer from the embedding to the class logits."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...core.constraints import Probability
from ...core.registries import register_head
from ..base import Head


@register_head("linear")
class LinearHead(Head):
    """Dropout (optional), then ``Linear(in_dim, num_classes)``.

    Args:
        in_dim: embedding size (wired by the builder).
        num_classes: number of outputs (wired by the builder).
        bias: learn an additive bias.
        dropout: dropout probability on the embedding.
    """

    out_dim_rule = "num_classes"

    def __init__(self, in_dim: int, num_classes: int, bias: bool = True, dropout: Probability = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.fc = nn.Linear(in_dim, num_classes, bias=bias)
        self.out_dim = num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(x) if self.dropout is not None else x)
