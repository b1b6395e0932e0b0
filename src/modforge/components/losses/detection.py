"""Dense-detection losses: sigmoid focal loss, GIoU loss, quality BCE; ``sigmoid_focal``.

The functions are what the ``fcos`` head computes its ``cls_loss``, ``box_loss`` and
``quality_loss`` with; each returns the *sum* by default, because dense detectors normalise
by the number of positive locations, not by the number of elements (FCOS: Tian et al.,
ICCV 2019; RetinaNet: Lin et al., ICCV 2017).

* :func:`sigmoid_focal_loss` — RetinaNet's focal loss on independent per-class sigmoids:
  ``−α_t (1 − p_t)^γ log p_t`` with ``α_t = α`` for positives and ``1 − α`` for negatives
  (α = 0.25, γ = 2 as in the paper, FCOS and mmdetection); the same formula as
  ``torchvision.ops.sigmoid_focal_loss`` and mmdetection's ``py_sigmoid_focal_loss``.
* :func:`giou_loss` — ``1 − GIoU`` (Rezatofighi et al., CVPR 2019), FCOS's box loss in
  its mmdetection configuration (the paper's IoU loss is the ``−log IoU`` variant).
* :func:`quality_bce_loss` — binary cross-entropy on logits against a soft target in
  [0, 1] (FCOS's centerness, or an IoU target).

``sigmoid_focal`` registers the focal loss for the model's ``losses:`` list (logits
``[B, C]`` and integer labels, one-vs-rest), so classifiers can use it too.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat, Probability
from ...core.registries import register_loss
from ..base import Loss
from ..boxes import generalized_box_iou

__all__ = ["SigmoidFocal", "giou_loss", "quality_bce_loss", "sigmoid_focal_loss"]


def _reduce(loss: torch.Tensor, reduction: str, weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``loss`` (times ``weight`` when given) summed, averaged or as it is."""
    if weight is not None:
        loss = loss * weight
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    if reduction == "none":
        return loss
    raise ValueError("reduction must be 'sum', 'mean' or 'none', got '" + reduction + "'")


def sigmoid_focal_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    alpha: float = 0.25,
    gamma: float = 2.0,
    reduction: str = "sum",
) -> torch.Tensor:
    """Focal loss on per-class sigmoids (Lin et al., 2017).

    Args:
        logits: any shape, e.g. ``[P, C]``.
        targets: the same shape, 1 for the true class and 0 elsewhere (soft targets in [0, 1]
            are accepted: ``p_t = p·t + (1 − p)(1 − t)``).
        alpha: weight of positives (negatives get ``1 − alpha``); a negative value turns the
            weighting off (torchvision's convention).
        gamma: focusing exponent; 0 gives (α-weighted) binary cross-entropy.
        reduction: ``"sum"`` (default; normalise outside), ``"mean"`` or ``"none"``.
    """
    targets = targets.to(logits.dtype)
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * (1 - p_t) ** gamma
    if alpha >= 0:
        loss = loss * (alpha * targets + (1 - alpha) * (1 - targets))
    return _reduce(loss, reduction)


def giou_loss(
    pred_boxes: torch.Tensor,
    target_boxes: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    reduction: str = "sum",
) -> torch.Tensor:
    """``1 − GIoU`` of aligned box pairs ``[N, 4]`` (x1y1x2y2), each optionally weighted
    (``[N]``; FCOS weights by the centerness target)."""
    return _reduce(1.0 - generalized_box_iou(pred_boxes, target_boxes, aligned=True), reduction, weight)


def quality_bce_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    reduction: str = "sum",
) -> torch.Tensor:
    """Binary cross-entropy with logits against soft quality targets in [0, 1] (centerness,
    or the IoU of the predicted box with its ground truth)."""
    loss = F.binary_cross_entropy_with_logits(logits, targets.to(logits.dtype), reduction="none")
    return _reduce(loss, reduction, weight)


@register_loss("sigmoid_focal")
class SigmoidFocal(Loss):
    """Sigmoid focal loss (Lin et al., 2017) on logits ``[B, C]`` with integer labels, one-vs-rest:
    the label's column is the positive, every other column a negative; a label outside
    ``0…C-1`` (e.g. -1 or C) makes the row all-negative (background, as in dense detectors).

    Args:
        alpha: weight of positives (negatives get ``1 − alpha``).
        gamma: focusing exponent; 0 gives α-weighted binary cross-entropy.
        reduction: 'mean' divides the sum over classes by the number of rows (each row holds at
            most one positive, so this is the detectors' per-positive normalisation); 'sum'
            returns the plain sum.
    """

    def __init__(
        self, alpha: Probability = 0.25, gamma: NonNegativeFloat = 2.0, reduction: Literal["mean", "sum"] = "mean"
    ):
        super().__init__()
        if gamma < 0:
            raise ValueError(f"gamma must not be negative, got {gamma}")
        self.alpha, self.gamma, self.reduction = float(alpha), float(gamma), reduction

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if target.dim() == logits.dim() - 1 and not target.is_floating_point():
            valid = (target >= 0) & (target < logits.shape[-1])
            onehot = F.one_hot(target.clamp(0, logits.shape[-1] - 1), logits.shape[-1]) * valid.unsqueeze(-1)
            target = onehot.to(logits.dtype)
        total = sigmoid_focal_loss(logits, target, self.alpha, self.gamma, reduction="sum")
        return total / max(1, logits.shape[0]) if self.reduction == "mean" else total
