"""Small building blocks shared by several zoo files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch.nn as nn

__all__ = ["Activation", "Norm", "activation", "mlp_layers"]

Activation = Literal["relu", "gelu", "silu", "tanh", "leaky_relu"]
Norm = Literal["none", "batch", "layer"]

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, "tanh": nn.Tanh, "leaky_relu": nn.LeakyReLU}


def activation(name: Activation) -> nn.Module:
    """A fresh activation module by name."""
    return _ACTIVATIONS[name]()


def mlp_layers(
    in_dim: int, hidden_dims: Sequence[int], act: Activation = "relu", dropout: float = 0.0, norm: Norm = "none"
) -> list[nn.Sequential]:
    """One ``Linear → [norm] → activation → [dropout]`` block per hidden size."""
    blocks, width = [], in_dim
    for hidden in hidden_dims:
        layers: list[nn.Module] = [nn.Linear(width, hidden)]
        if norm == "batch":
            layers.append(nn.BatchNorm1d(hidden))
        elif norm == "layer":
            layers.append(nn.LayerNorm(hidden))
        layers.append(activation(act))
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        blocks.append(nn.Sequential(*layers))
        width = hidden
    return blocks
