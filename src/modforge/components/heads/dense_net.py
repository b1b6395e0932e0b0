"""The network side the dense detection heads (``fcos``, ``retinanet``) share.

* :func:`conv_tower` — a classification or box tower, ``depth`` × (3×3 conv → [GroupNorm] → ReLU);
* :func:`prior_bias` — the classification bias of the focal-loss prior;
* :func:`level_points` — the pixel centres of every location of every level (FCOS's locations,
  RetinaNet's anchor centres);
* :class:`DenseNet` — the skeleton of a head's network: whether the levels need a 1×1 projection
  to the tower width, the paper's initialisation of towers and predictors, and the check that
  the feature maps come one per level. Each head's network keeps its own modules (their names
  are the checkpoints' state_dict keys) and its own ``forward``.

Everything here is TorchScript-compatible: the heads' networks script.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

__all__ = ["DenseNet", "conv_tower", "level_points", "prior_bias"]


def conv_tower(in_channels: int, width: int, depth: int, groups: int) -> nn.Sequential:
    """``depth`` × (3×3 conv → GroupNorm(``groups``) → ReLU); ``groups`` 0: 3×3 conv (with bias) → ReLU."""
    layers: list[nn.Module] = []
    for d in range(depth):
        conv = nn.Conv2d(in_channels if d == 0 else width, width, 3, padding=1, bias=groups == 0)
        layers += [conv, nn.GroupNorm(groups, width), nn.ReLU(inplace=True)] if groups else [conv, nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


def prior_bias(prior_prob: float) -> float:
    """The classification bias whose sigmoid is ``prior_prob`` (RetinaNet's focal-loss prior)."""
    return -math.log((1 - prior_prob) / prior_prob)


def level_points(sizes: list[list[int]], strides: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The locations of every level, finest first, row-major within a level: ``[P, 2]``
    ``(x, y)`` pixels, ``((j + ½)·s, (i + ½)·s)`` for map position ``(i, j)``."""
    points: list[torch.Tensor] = []
    for i in range(len(sizes)):  # indices, not zip: TorchScript's zip takes no strict=
        ys = (torch.arange(sizes[i][0], dtype=dtype, device=device) + 0.5) * strides[i]
        xs = (torch.arange(sizes[i][1], dtype=dtype, device=device) + 0.5) * strides[i]
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        points.append(torch.stack([grid_x.reshape(-1), grid_y.reshape(-1)], dim=1))
    return torch.cat(points, dim=0)


class DenseNet(nn.Module):
    """The skeleton of a dense head's network (feature maps → raw per-level maps).

    A subclass calls ``super().__init__(name, in_dim, width)``, builds its projections (when
    :attr:`projected`), towers (on :attr:`tower_in` channels) and predictors in the order its
    checkpoints expect, then :meth:`init_weights`; its ``forward`` starts with :meth:`check_levels`.

    Args:
        name: the head's name, which starts the level-count error.
        in_dim: channels of each level.
        width: tower width.
    """

    def __init__(self, name: str, in_dim: list[int], width: int):
        super().__init__()
        self.part_name = name
        self.num_levels = len(in_dim)
        self.projected = len(set(in_dim)) > 1  # the levels' widths differ: a 1×1 conv brings each to the width
        self.tower_in = width if self.projected else in_dim[0]

    def init_weights(self, modules: list[nn.Module], cls_logits: nn.Conv2d, prior_prob: float) -> None:
        """The papers' initialisation: every convolution of ``modules`` (towers and predictors, in
        order) N(0, 0.01) with zero biases, then the classification bias at the prior ``prior_prob``."""
        for module in modules:
            for conv in module.modules():
                if isinstance(conv, nn.Conv2d):
                    nn.init.normal_(conv.weight, std=0.01)
                    if conv.bias is not None:
                        nn.init.zeros_(conv.bias)
        nn.init.constant_(cls_logits.bias, prior_bias(prior_prob))

    def check_levels(self, features: list[torch.Tensor]) -> None:
        """One feature map per level, or a clear error."""
        if len(features) != self.num_levels:
            raise ValueError(
                self.part_name + ": expected " + str(self.num_levels) + " feature levels (one per stride), got "
                + str(len(features))
            )  # fmt: skip
