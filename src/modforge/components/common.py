"""Small building blocks shared by several zoo files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn as nn

from .layouts import Layout

__all__ = [
    "Activation",
    "Norm",
    "SqueezeExcitation",
    "activation",
    "frame_features",
    "frame_layout",
    "mlp_layers",
    "require_positive",
]

Activation = Literal["relu", "gelu", "silu", "tanh", "leaky_relu"]
Norm = Literal["none", "batch", "layer"]
WeightInit = Literal["pytorch", "xavier_uniform"]
"""How a part's linear layers start: PyTorch's default, or Xavier-uniform weights with zero
biases (Mammoth's ``xavier`` for its MNIST MLP and classifiers)."""


def init_linear_layers(module: nn.Module, how: WeightInit) -> None:
    """Re-initialise every ``nn.Linear`` in ``module`` as ``how`` says (in place; 'pytorch': leave them)."""
    if how == "pytorch":
        return
    if how != "xavier_uniform":
        raise ValueError(f"weight_init must be 'pytorch' or 'xavier_uniform', got {how!r}")
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

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


def require_positive(part: str, **sizes: int) -> None:
    """One ValueError naming every size of ``part`` that is below 1."""
    bad = [f"{name}={value}" for name, value in sizes.items() if value < 1]
    if bad:
        raise ValueError(f"{part} sizes must be positive, got {', '.join(bad)}")


def frame_layout(part: str, in_layout: Layout | str) -> Layout:
    """The layout of a part that takes frame features: sequence [B, T, D] or channels [B, D, T]."""
    layout = Layout(in_layout)
    if layout not in (Layout.SEQUENCE, Layout.CHANNELS):
        raise ValueError(f"{part} takes 'sequence' [B, T, D] or 'channels' [B, D, T] input, got '{layout.value}'")
    return layout


def frame_features(x: torch.Tensor, in_dim: int, channel_first: bool, part: str, channels: bool) -> torch.Tensor:
    """Frame features ``x`` — ``[B, D, T]`` when ``channel_first``, else ``[B, T, D]`` — checked to have
    ``D = in_dim`` and returned channel-first (``channels``) or time-first. TorchScript compiles it.

    Raises:
        ValueError: another rank or feature size, naming ``part`` and the layout it expects.
    """
    axis = 1 if channel_first else 2
    if x.dim() != 3 or x.shape[axis] != in_dim:
        layout = "[B, D, T]" if channel_first else "[B, T, D]"
        raise ValueError(f"{part} expects frame features {layout} with D={in_dim}, got {list(x.shape)}")
    return x if channel_first == channels else x.transpose(1, 2)


class SqueezeExcitation(nn.Module):
    """Channel gates from the time-averaged map of ``[B, C, T]`` features (Hu et al., 2018):
    ``mean over T → Conv1D(C, bottleneck) → ReLU → Conv1D(bottleneck, C) → sigmoid``, times the input."""

    def __init__(self, channels: int, bottleneck: int):
        super().__init__()
        self.reduce = nn.Conv1d(channels, bottleneck, 1)
        self.expand = nn.Conv1d(bottleneck, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.expand(torch.relu(self.reduce(x.mean(dim=2, keepdim=True)))))
