"""DeepFense's "Adding a New Backend" examples, as a modforge user writes them.

Differences from the DeepFense page: one decorator and nothing else (no edit of any
``__init__.py``: the file is a plug-in); ``in_dim`` arrives from the builder instead of
being hand-copied into the config as ``input_dim``; arguments are typed parameters
instead of ``config.get(...)``; the output size is ``out_dim``. ``MyBackend`` stays a
plain ``nn.Module`` (it handles [B, T, D] and [B, D] itself); ``AttentionBackend``
subclasses modforge's ``Backbone`` and declares the layout it takes, so the builder
checks the wiring and ``modforge check`` knows what to feed it.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import modforge as mf
from modforge.components import Backbone, Layout


@mf.register_backbone("MyBackend")
class MyBackend(nn.Module):
    """Custom backbone for audio spoofing detection: mean-pool over time, then an MLP.

    Args:
        in_dim: feature size of the frontend's output (wired by the builder).
        output_dim: embedding size.
        hidden_dim: hidden layer size.
    """

    def __init__(self, in_dim: int, output_dim: int = 128, hidden_dim: int = 256):
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Dropout(0.3), nn.Linear(hidden_dim, output_dim)
        )
        self.out_dim = output_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:  # [B, T, D] → [B, D]
            x = x.mean(dim=1)
        return self.network(x)


@mf.register_backbone("AttentionBackend")
class AttentionBackend(Backbone):
    """Attention pooling over time, then a projection.

    Args:
        in_dim: feature size of the frontend's output (wired by the builder).
        output_dim: embedding size.
        hidden_dim: size of the attention scorer's hidden layer.
    """

    accepts = (Layout.SEQUENCE,)
    produces = Layout.VECTOR

    def __init__(self, in_dim: int, output_dim: int = 128, hidden_dim: int = 256):
        super().__init__()
        self.attention = nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, 1))
        self.projection = nn.Linear(in_dim, output_dim)
        self.out_dim = output_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = F.softmax(self.attention(x), dim=1)  # [B, T, 1]
        return self.projection(torch.sum(x * weights, dim=1))
