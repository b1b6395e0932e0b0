"""``cosine`` — a cosine-similarity classifier: normalised embedding · normalised class
weights, times a (learnable) scale. Used in few-shot and continual learning because its
logits do not grow with the embedding norm."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat, PositiveFloat
from ...core.registries import register_head
from ..base import Head


@register_head("cosine")
class CosineHead(Head):
    """``logits = scale · cos(embedding, class weight)``.

    Args:
        in_dim: embedding size (wired by the builder).
        num_classes: number of classes (wired by the builder).
        scale: initial multiplier of the cosines (they lie in [-1, 1]).
        learn_scale: learn the scale (as a log, so it stays positive).
        eps: added to the norms of the embedding and of each class weight before dividing
            (Mammoth's cosine classifiers add 1e-5); 0: divide by the norms themselves.
    """

    out_dim_rule = "num_classes"

    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        scale: PositiveFloat = 16.0,
        learn_scale: bool = True,
        eps: NonNegativeFloat = 0.0,
    ):
        super().__init__()
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        if eps < 0:
            raise ValueError(f"eps must not be negative, got {eps}")
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.empty(num_classes, in_dim))
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        log_scale = torch.tensor(float(scale)).log()
        if learn_scale:
            self.log_scale = nn.Parameter(log_scale)
        else:
            self.register_buffer("log_scale", log_scale)
        self.out_dim = num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_scale.exp() * F.linear(self._unit(x), self._unit(self.weight))

    def _unit(self, rows: torch.Tensor) -> torch.Tensor:
        if self.eps:
            return rows / (rows.norm(p=2, dim=1, keepdim=True) + self.eps)
        return F.normalize(rows, dim=1)
