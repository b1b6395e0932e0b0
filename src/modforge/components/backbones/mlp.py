"""``mlp`` — a multi-layer perceptron on vectors (e.g. digits as 64 features)."""

from __future__ import annotations

import torch

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_backbone
from ..base import Backbone
from ..common import Activation, Norm, WeightInit, init_linear_layers, mlp_layers
from ..layouts import Layout


@register_backbone("mlp")
class MLP(Backbone):
    """A stack of fully connected layers; each hidden layer is one block.

    Args:
        in_dim: input features (wired by the builder).
        hidden_dims: width of each hidden layer, in order.
        activation: non-linearity after each layer.
        dropout: dropout probability after each activation.
        norm: normalisation after each linear layer.
        weight_init: 'pytorch' (PyTorch's default) or 'xavier_uniform' (Xavier-uniform weights,
            zero biases: Mammoth's MNIST MLP).
    """

    accepts = (Layout.VECTOR,)
    produces = Layout.VECTOR
    out_dim_rule = "the last of hidden_dims (in_dim when hidden_dims is empty)"

    def __init__(
        self,
        in_dim: int,
        hidden_dims: tuple[PositiveInt, ...] = (256, 256),
        activation: Activation = "relu",
        dropout: Probability = 0.0,
        norm: Norm = "none",
        weight_init: WeightInit = "pytorch",
    ):
        super().__init__()
        if any(h <= 0 for h in hidden_dims):
            raise ValueError(f"hidden_dims must be positive, got {tuple(hidden_dims)}")
        for i, block in enumerate(mlp_layers(in_dim, hidden_dims, activation, dropout, norm)):
            self.add_module(f"layer{i + 1}", block)
        self.out_dim = hidden_dims[-1] if hidden_dims else in_dim
        init_linear_layers(self, weight_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.children():  # the blocks in order (registration order; TorchScript can script this)
            x = block(x)
        return x
