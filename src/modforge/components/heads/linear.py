"""``linear`` — one fully connected layer from the embedding to the class logits."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...core.constraints import Probability
from ...core.registries import register_head
from ..base import Head
from ..common import WeightInit, init_linear_layers


@register_head("linear")
class LinearHead(Head):
    """Dropout (optional), then ``Linear(in_dim, num_classes)``.

    Args:
        in_dim: embedding size (wired by the builder).
        num_classes: number of outputs (wired by the builder).
        bias: learn an additive bias.
        dropout: dropout probability on the embedding.
        weight_init: 'pytorch' (PyTorch's default) or 'xavier_uniform' (Xavier-uniform weights,
            zero bias: Mammoth's classifiers).
    """

    out_dim_rule = "num_classes"

    def __init__(self, in_dim: int, num_classes: int, bias: bool = True, dropout: Probability = 0.0,
                 weight_init: WeightInit = "pytorch"):  # fmt: skip
        super().__init__()
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.fc = nn.Linear(in_dim, num_classes, bias=bias)
        self.out_dim = num_classes
        init_linear_layers(self, weight_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(x) if self.dropout is not None else x)
