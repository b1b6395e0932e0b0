"""Rehearsal methods: ``er`` (Experience Replay), ``der`` and ``derpp`` (Dark Experience
Replay and DER++, Buzzega et al., NeurIPS 2020).

* **ER**: each step trains on the current batch joined with a minibatch drawn from the
  buffer; the buffer keeps a reservoir sample of the stream.
* **DER**: the buffer also keeps the *logits* the model gave each sample when it was
  stored; the loss adds ``alpha · MSE(current logits of replayed samples, stored logits)``
  — distilling the past model's outputs, not only its labels.
* **DER++**: DER plus ``beta · CE`` on a second, independent replay minibatch's labels.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat, PositiveInt
from ...core.registries import register_algorithm
from ..buffer import Policy
from .base import ReplayAlgorithm, joined
from .checks import check, non_negative

__all__ = ["DER", "DERpp", "DistillingReplay", "ExperienceReplay"]


@register_algorithm("er")
class ExperienceReplay(ReplayAlgorithm):
    """Experience Replay: the current batch and a replayed minibatch, one loss.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        buffer_size: how many past samples are kept.
        minibatch_size: how many are replayed per step (None: the batch size).
        buffer_policy: 'reservoir', 'class_balanced' (CBRS) or 'greedy_balanced' (GDumb's sampler).
        seed: seeds the buffer's sampling (wired from the config's seed).
    """

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        loss = trainer.forward(joined(batch, self.replay(batch)))["loss"]
        self.remember(batch, {})
        return loss


class DistillingReplay(ReplayAlgorithm):
    """Base of rehearsal with an ``alpha``-weighted distillation term on the replayed samples
    (``der`` distils their stored logits, ``layer_distill`` a teacher's layers): the replay
    buffer's arguments and ``alpha``, checked. Not registered itself; a subclass's docstring
    says what ``alpha`` weighs."""

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        alpha: NonNegativeFloat = 0.3,
        buffer_size: PositiveInt = 200,
        minibatch_size: PositiveInt | None = None,
        buffer_policy: Policy = "reservoir",
        seed: int = 0,
    ):
        super().__init__(model, num_classes, buffer_size, minibatch_size, buffer_policy, seed)
        check(non_negative("alpha", alpha))
        self.alpha = alpha


@register_algorithm("der")
class DER(DistillingReplay):
    """Dark Experience Replay: logit distillation on replayed samples.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        alpha: weight of the MSE between current and stored logits (the paper's α).
        buffer_size: how many past samples (and their logits) are kept.
        minibatch_size: how many are replayed per step (None: the batch size).
        buffer_policy: 'reservoir', 'class_balanced' (CBRS) or 'greedy_balanced' (GDumb's sampler).
        seed: seeds the buffer's sampling (wired from the config's seed).
    """

    stored = ("input", "logits")

    def distillation(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor | None:
        """``alpha · MSE(logits now, logits stored)`` on a replayed minibatch (None: empty buffer)."""
        past = self.replay(batch)
        if past is None:
            return None
        return self.alpha * F.mse_loss(trainer.forward({"input": past["input"]})["logits"], past["logits"])

    def label_term(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor | None:
        """A loss on the labels of replayed samples, added with the distillation (None: none; DER++'s)."""
        return None

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        out = trainer.forward(batch)
        loss = out["loss"]
        distil = self.distillation(trainer, batch)
        if distil is not None:
            labels = self.label_term(trainer, batch)
            loss = loss + distil if labels is None else loss + distil + labels
        self.remember(batch, out)
        return loss


@register_algorithm("derpp")
class DERpp(DER):
    """DER++: DER plus cross-entropy on the labels of a second replayed minibatch.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        alpha: weight of the logit distillation (the paper's α).
        beta: weight of the replayed labels' cross-entropy (the paper's β).
        buffer_size: how many past samples (and their logits) are kept.
        minibatch_size: how many are replayed per step and term (None: the batch size).
        buffer_policy: 'reservoir', 'class_balanced' (CBRS) or 'greedy_balanced' (GDumb's sampler).
        seed: seeds the buffer's sampling (wired from the config's seed).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        alpha: NonNegativeFloat = 0.1,
        beta: NonNegativeFloat = 0.5,
        buffer_size: PositiveInt = 200,
        minibatch_size: PositiveInt | None = None,
        buffer_policy: Policy = "reservoir",
        seed: int = 0,
    ):
        super().__init__(model, num_classes, alpha, buffer_size, minibatch_size, buffer_policy, seed)
        check(non_negative("beta", beta))
        self.beta = beta

    def label_term(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor | None:
        """``beta · CE`` on a second replayed minibatch (drawn after the distillation's)."""
        past = self.replay(batch)
        replayed = trainer.forward({"input": past["input"]})["logits"]
        return self.beta * F.cross_entropy(replayed, past["label"])
