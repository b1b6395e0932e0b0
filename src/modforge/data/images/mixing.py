"""Batch mixing: MixUp and CutMix (torchvision v2), chosen per batch, with soft targets.

``data.transforms.mix: {mixup_alpha: 0.8, cutmix_alpha: 1.0, prob: 1.0, switch_prob: 0.5}``
mixes each training batch with its own roll: with probability ``prob`` the batch is mixed,
by CutMix with probability ``switch_prob`` when both alphas are set (else by whichever is
set). The batch's ``label`` becomes a ``[B, num_classes]`` float tensor of class
probabilities, which ``cross_entropy`` takes as soft targets; evaluation is never mixed.
The draws are seeded by (seed, epoch, the batch's first sample) — batches are the same on
resume, so their mixing is too.
"""

from __future__ import annotations

from typing import Any

import torch

from ...core.errors import ConfigError

__all__ = ["BatchMixing", "mixing_from_config"]


class BatchMixing:
    """MixUp/CutMix of one batch (see the module doc).

    Args:
        num_classes: classes of the soft targets.
        mixup_alpha: Beta(α, α) of MixUp's mixing weight (0: no MixUp).
        cutmix_alpha: Beta(α, α) of CutMix's area (0: no CutMix).
        prob: probability that a batch is mixed at all.
        switch_prob: probability of CutMix rather than MixUp when both are on.
    """

    def __init__(self, num_classes: int, mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0, prob: float = 1.0,
                 switch_prob: float = 0.5):  # fmt: skip
        from torchvision.transforms import v2

        self.num_classes, self.prob, self.switch_prob = int(num_classes), float(prob), float(switch_prob)
        self.mixup = v2.MixUp(alpha=mixup_alpha, num_classes=num_classes) if mixup_alpha > 0 else None
        self.cutmix = v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes) if cutmix_alpha > 0 else None

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Images ``[B, C, H, W]`` float and labels ``[B]`` → mixed images, soft labels ``[B, classes]``
        (one-hot when this batch is not mixed). Draws from torch's default generator: seed it first."""
        mix = bool(torch.rand(()) < self.prob)
        use_cutmix = self.cutmix is not None and (self.mixup is None or bool(torch.rand(()) < self.switch_prob))
        if not mix or len(labels) < 2:
            return images, torch.nn.functional.one_hot(labels, self.num_classes).to(images.dtype)
        transform = self.cutmix if use_cutmix else self.mixup
        mixed, soft = transform(images, labels)
        return mixed, soft.to(images.dtype)


_KEYS = {"mixup_alpha", "cutmix_alpha", "prob", "switch_prob"}


def mixing_from_config(value: Any, num_classes: int, path: str) -> BatchMixing | None:
    """:class:`BatchMixing` from ``data.transforms.mix`` (None or empty: no mixing); errors name ``path``."""
    if not value:
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"expected a mapping like {{mixup_alpha: 0.8, cutmix_alpha: 1.0}}, got {value!r}", path=path)
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} (expected {', '.join(sorted(_KEYS))})", path=path)
    numbers = {}
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise ConfigError(f"expected a number, got {item!r}", path=f"{path}.{key}")
        numbers[key] = float(item)
    for key in ("mixup_alpha", "cutmix_alpha"):
        if numbers.get(key, 0.0) < 0:
            raise ConfigError(f"must not be negative, got {numbers[key]}", path=f"{path}.{key}")
    for key in ("prob", "switch_prob"):
        if not 0.0 <= numbers.get(key, 0.5) <= 1.0:
            raise ConfigError(f"must lie in [0, 1], got {numbers[key]}", path=f"{path}.{key}")
    if numbers.get("mixup_alpha", 0.0) == 0 and numbers.get("cutmix_alpha", 0.0) == 0:
        raise ConfigError("set mixup_alpha and/or cutmix_alpha above 0 (or leave mix out)", path=path)
    return BatchMixing(num_classes, **numbers)
