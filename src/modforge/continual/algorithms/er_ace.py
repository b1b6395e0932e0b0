"""``er_ace`` — Experience Replay with Asymmetric Cross-Entropy (Caccia et al., "New Insights
on Reducing Abrupt Representation Change in Online Continual Learning", ICLR 2022).

Following Mammoth's ``models/er_ace.py`` (aimagelab/mammoth, commit
e75a491c69fd729edeb01431afb753d9157d9a81):

* **Incoming batch**: cross-entropy over a *masked* set of logits. A column stays when its
  class is in the current batch, or when its index is at least the largest class seen in any
  batch so far (so the classes not met yet, which follow in class-IL numbering, stay too);
  every other column — classes of earlier tasks absent from the batch — is set to ``-1e9``
  before the softmax, so the new classes do not push the old ones' logits down.
* **Replayed minibatch**: plain cross-entropy over all logits (the old classes are learned
  only there).
* The mask and the replay start with the second task (``task_free``: from the first step);
  the buffer is filled by reservoir sampling after every step.

Mammoth also replaces the model's classifier with a cosine one (``--use_custom_classifier``,
on by default). A modforge algorithm never changes the model: to match, configure the head as
``{type: cosine, args: {scale: 10, learn_scale: false, eps: 1.0e-5}}`` (tested step for step against
Mammoth's code: docs/worlds/continual-parity.md).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ...core.constraints import PositiveInt
from ...core.registries import register_algorithm
from ..buffer import Policy
from .base import ReplayAlgorithm

__all__ = ["ERACE"]

MASKED = -1e9  # what a masked logit becomes (Mammoth's value)


@register_algorithm("er_ace")
class ERACE(ReplayAlgorithm):
    """ER-ACE: asymmetric cross-entropy on the incoming batch, plain replay.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        task_free: mask and replay from the first task on (Mammoth's ``--task_free``).
        buffer_size: how many past samples are kept.
        minibatch_size: how many are replayed per step (None: the batch size).
        buffer_policy: 'reservoir', 'class_balanced' or 'greedy_balanced'.
        seed: seeds the buffer's sampling (wired from the config's seed).
    """

    settings = ("class-il",)

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        task_free: bool = False,
        buffer_size: PositiveInt = 200,
        minibatch_size: PositiveInt | None = None,
        buffer_policy: Policy = "reservoir",
        seed: int = 0,
    ):
        super().__init__(model, num_classes, buffer_size, minibatch_size, buffer_policy, seed)
        self.task_free = bool(task_free)
        self.seen_so_far: list[int] = []  # the labels met in training batches so far, sorted

    def mask(self, labels: torch.Tensor, columns: int) -> torch.Tensor:
        """The logit columns the incoming batch's cross-entropy keeps (bool [columns]): the
        classes in the batch, and every index from the largest class seen so far on."""
        keep = torch.zeros(columns, dtype=torch.bool, device=labels.device)
        keep[labels.unique()] = True
        keep[max(self.seen_so_far) :] = True
        return keep

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        labels = batch["label"]
        every = self.processes.gather_rows({"label": labels})["label"]  # the whole batch's (several processes)
        self.seen_so_far = sorted(set(self.seen_so_far) | set(every.unique().tolist()))
        logits = trainer.forward({"input": batch["input"]})["logits"]
        active = self.task > 0 or self.task_free
        if active:
            logits = logits.masked_fill(~self.mask(every, logits.shape[1]), MASKED)
        loss = F.cross_entropy(logits, labels)
        if active:
            past = self.replay(batch)
            if past is not None:
                loss = loss + F.cross_entropy(trainer.forward({"input": past["input"]})["logits"], past["label"])
        self.remember(batch, {})
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "seen_so_far": list(self.seen_so_far)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.seen_so_far = [int(c) for c in state.get("seen_so_far", [])]
