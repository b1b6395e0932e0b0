"""``mlp`` head — hidden layers, then the class logits."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_head
from ..base import Head
from ..common import Activation, Norm, mlp_layers


@register_head("mlp")
class MLPHead(Head):
    """``[Linear → activation → dropout] × len(hidden_dims) → Linear(num_classes)``.

    Args:
        in_dim: embedding size (wired by the builder).
        num_classes: number of classes (wired by the builder).
        hidden_dims: widths of the hidden layers.
        activation: non-linearity of the hidden layers.
        dropout: dropout after each hidden layer.
        norm: normalisation in the hidden layers.
    """

    out_dim_rule = "num_classes"

    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        hidden_dims: tuple[PositiveInt, ...] = (256,),
        activation: Activation = "relu",
        dropout: Probability = 0.0,
        norm: Norm = "none",
    ):
        super().__init__()
        self.hidden = nn.Sequential(*mlp_layers(in_dim, hidden_dims, activation, dropout, norm))
        self.fc = nn.Linear(hidden_dims[-1] if hidden_dims else in_dim, num_classes)
        self.out_dim = num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.hidden(x))
