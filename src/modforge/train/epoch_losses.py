"""The epoch's training loss, kept on the device: the per-batch entries, their sample-weighted
sum (reduced over processes once per batch count) and the named loss terms (``cls_loss``,
``distill_logit_loss``…) that become ``train_<term>`` columns. The host reads the sums only
every ``log_every`` steps and at the epoch's end (:class:`~modforge.train.trainer.Trainer`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..core.errors import ModforgeError
from . import distributed
from .metrics import is_loss_term

__all__ = ["EpochLosses", "loss_of", "loss_terms"]


def loss_terms(out: dict[str, Any]) -> tuple[str, ...]:
    """The named loss terms of a model's output: every scalar tensor under a loss key
    (:func:`~modforge.model.spec.is_loss_key`: ``loss_*``, ``*_loss``) besides ``loss`` —
    UP-style ``cls_loss``, ``box_loss``, a config's ``loss_<name>`` — in output order; none when
    there is only one (it is the total, perhaps weighted: a column of its own would repeat it)."""
    terms = tuple(k for k, v in out.items() if is_loss_term(k) and isinstance(v, torch.Tensor) and v.ndim == 0)
    return terms if len(terms) > 1 else ()


def loss_of(out: dict[str, Any]) -> torch.Tensor:
    """The ``loss`` of a training forward pass, or one clear error saying how to get one."""
    if "loss" not in out:
        raise ModforgeError(
            "the model returned no 'loss' for a training batch: configure model.losses "
            "(e.g. losses: [cross_entropy]) or have a stage add a loss key"
        )
    return out["loss"]



class EpochLosses:
    """The :class:`~modforge.train.trainer.Trainer`'s loss bookkeeping (a part of the trainer, kept in
    a file of its own; its state — ``_losses``, ``_sizes``, ``loss_parts`` — is the trainer's)."""

    def note_loss_parts(self, out: dict[str, Any]) -> None:
        """Note this batch's loss terms — every scalar ``*_loss`` tensor of ``out`` besides
        ``loss`` (UP-style ``cls_loss``, ``box_loss``...) — so the epoch's row logs their mean
        as ``train_<term>``. An overriding :meth:`training_step` may call it with its output;
        epochs with batches that did not are logged without the terms."""
        if self.loss_parts is None:
            self.loss_parts = loss_terms(out)
        if self.loss_parts and all(isinstance(out.get(k), torch.Tensor) for k in self.loss_parts):
            self._step_parts = torch.stack([out[k].detach().float().reshape(()) for k in self.loss_parts])

    def _loss_entry(self) -> torch.Tensor:
        """This batch's entry in the epoch's losses: the loss, or (loss, terms...) when the
        model names its loss terms (NaN terms: the step did not note them)."""
        parts, self._step_parts = self._step_parts, None
        if not self.loss_parts:
            return self.last_loss
        if parts is None:
            parts = torch.full((len(self.loss_parts),), math.nan, device=self.last_loss.device)
        return torch.cat([self.last_loss.float().reshape(1), parts.to(self.last_loss.device)])

    def _loss_total(self) -> torch.Tensor:
        """The epoch's sample-weighted loss sum so far (a few tensor ops, on the device): a
        scalar, or the vector (loss, terms...) when the model names its loss terms."""
        if not self._losses:
            return torch.zeros(1 + len(self.loss_parts)) if self.loss_parts else torch.zeros(())
        losses = torch.stack(self._losses).float()
        sizes = torch.tensor(self._sizes, dtype=losses.dtype, device=losses.device)
        return (losses * sizes.reshape(-1, *([1] * (losses.ndim - 1)))).sum(0)

    def _reduced_loss(self) -> tuple[torch.Tensor, int]:
        """The epoch's loss sum and sample count so far, over every process (reduced once
        per batch count: the epoch-end row, the NaN check and the checkpoint share it)."""
        if self.world_size < 2:
            return self._loss_total(), sum(self._sizes)
        key = (self.epoch, self.global_step, len(self._losses))
        if self._reduced is None or self._reduced[0] != key:
            total, count = self._loss_total(), sum(self._sizes)
            count_row = torch.tensor([float(count)], device=self.device).double()
            both = torch.cat([total.double().to(self.device).reshape(-1), count_row])
            both = distributed.all_reduce_sum(both, "the training loss")
            self._reduced = (key, both[:-1].reshape(total.shape), int(both[-1]))
        return self._reduced[1], self._reduced[2]

    def _mean_loss(self) -> float:
        total, count = self._reduced_loss()
        return float(total.reshape(-1)[0]) / count if count else float("nan")

    def _mean_loss_parts(self) -> dict[str, float]:
        """The epoch's mean of each named loss term (``train_cls_loss``...); terms some batch
        did not note are left out."""
        if not self.loss_parts:
            return {}
        total, count = self._reduced_loss()
        if not count or total.ndim == 0:
            return {}
        means = {f"train_{k}": float(v) / count for k, v in zip(self.loss_parts, total[1:].tolist(), strict=True)}
        return {k: v for k, v in means.items() if math.isfinite(v)}

    @property
    def rows_in_epoch(self) -> int:
        """Rows of the batches this process trained on so far this epoch (a resumed epoch's
        earlier ones included) — the real count, where ``samples_in_epoch`` counts whole
        batches of the nominal size (what a resume skips)."""
        return int(sum(self._sizes))
