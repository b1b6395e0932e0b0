"""Classification losses: ``cross_entropy``, ``focal``, ``bce_with_logits``.

Each reads the logits (``input_key = "logits"``) and the integer class labels.
``cross_entropy`` also gives a detection score (:func:`log_odds` of class 1 — bona fide
in spoofing detection), so it serves two-class detection tasks as well.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat, PositiveFloat, Probability
from ...core.registries import register_loss
from ..base import Loss


def log_odds(logits: torch.Tensor, positive: int = 1) -> torch.Tensor:
    """``log p(positive) − log p(any other class)`` per row of softmax logits [B, C]: the
    logit difference for two classes; a single logit column is returned as it is."""
    if logits.shape[-1] == 1:
        return logits[:, 0]
    others = torch.cat([logits[:, :positive], logits[:, positive + 1 :]], dim=1)
    return logits[:, positive] - torch.logsumexp(others, dim=1)


def _class_weights(weights: Optional[list[float]], num_classes: Optional[int], name: str) -> Optional[torch.Tensor]:
    if weights is None:
        return None
    if num_classes is not None and len(weights) != num_classes:
        raise ValueError(f"{name} needs one weight per class ({num_classes}), got {len(weights)}")
    if any(w < 0 for w in weights):
        raise ValueError(f"{name} must not be negative, got {weights}")
    return torch.tensor(weights, dtype=torch.float32)


@register_loss("cross_entropy")
class CrossEntropy(Loss):
    """Softmax cross-entropy with optional label smoothing and class weights.

    Args:
        num_classes: number of classes (wired by the builder; checks class_weights).
        label_smoothing: mass moved from the true class to all classes uniformly, in [0, 1).
        class_weights: one weight per class (e.g. inverse frequencies), or None.
        ignore_index: label value that contributes nothing.
        score: the detection score: 'log_odds' (``logit_1 − logit_0``, calibrated to the
            softmax) or 'logit' (class 1's raw logit — what the AASIST and RawNet2 reference
            code writes to its score files, so their EERs are reproduced exactly).
    """

    soft_targets = True
    """Labels may also be class probabilities ``[B, C]`` (MixUp/CutMix batches)."""

    def __init__(
        self,
        num_classes: Optional[int] = None,
        label_smoothing: Probability = 0.0,
        class_weights: Optional[list[NonNegativeFloat]] = None,
        ignore_index: int = -100,
        score: Literal["log_odds", "logit"] = "log_odds",
    ):
        super().__init__()
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.label_smoothing, self.ignore_index, self.score_kind = label_smoothing, ignore_index, score
        self.register_buffer("weight", _class_weights(class_weights, num_classes, "class_weights"))

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(
            logits, target, weight=self.weight, ignore_index=self.ignore_index, label_smoothing=self.label_smoothing
        )

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        """Detection score [B], higher = more class 1 (bona fide in spoofing): its log-odds
        (``logit_1 − logit_0`` for two classes), or with ``score='logit'`` its raw logit."""
        return logits[:, 1] if self.score_kind == "logit" and logits.shape[-1] > 1 else log_odds(logits)


@register_loss("focal")
class FocalLoss(Loss):
    """Focal loss (Lin et al., 2017): cross-entropy scaled by ``(1 - p_true)^gamma``, so
    easy examples count less; optional per-class weights ``alpha``.

    Args:
        num_classes: number of classes (wired by the builder; checks alpha).
        gamma: focusing strength; 0 gives plain cross-entropy.
        alpha: one weight per class, or None.
    """

    def __init__(
        self,
        num_classes: Optional[int] = None,
        gamma: NonNegativeFloat = 2.0,
        alpha: Optional[list[NonNegativeFloat]] = None,
    ):
        super().__init__()
        if gamma < 0:
            raise ValueError(f"gamma must not be negative, got {gamma}")
        self.gamma = gamma
        self.register_buffer("alpha", _class_weights(alpha, num_classes, "alpha"))

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(logits, dim=-1).gather(1, target.unsqueeze(1)).squeeze(1)
        loss = -((1.0 - log_p.exp()) ** self.gamma) * log_p
        if self.alpha is not None:
            loss = loss * self.alpha[target]
        return loss.mean()


@register_loss("bce_with_logits")
class BCEWithLogits(Loss):
    """Binary cross-entropy on logits. Targets may be class indices (one-hot encoded to
    the logits' width, i.e. one-vs-rest), or float targets of the logits' shape
    (multi-label); with a single logit column the label is the positive probability.

    Args:
        pos_weight: weight of positive examples (e.g. #negatives / #positives), or None.
    """

    def __init__(self, pos_weight: Optional[PositiveFloat] = None):
        super().__init__()
        self.register_buffer("pos_weight", None if pos_weight is None else torch.tensor(float(pos_weight)))

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if target.dtype in (torch.int64, torch.int32, torch.long) and target.dim() == logits.dim() - 1:
            if logits.shape[-1] == 1:
                target = target.to(logits.dtype).unsqueeze(-1)
            else:
                target = F.one_hot(target, logits.shape[-1]).to(logits.dtype)
        return F.binary_cross_entropy_with_logits(logits, target.to(logits.dtype), pos_weight=self.pos_weight)
