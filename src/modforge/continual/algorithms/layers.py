"""``layer_distill`` — rehearsal plus distillation of *every layer* (TwF-style; Boschini et al.,
"Transfer without Forgetting", ECCV 2022, distil all intermediate features of a frozen
teacher). At the end of each task the model is frozen as the teacher; each step trains on the
current batch joined with a replayed minibatch (as ``er``) and adds ``alpha`` times the mean,
over every layer ``model(x, returnt="full")`` reports, of the MSE between the student's and
the teacher's outputs on the replayed inputs. TwF's attention modules that choose *which*
features to transfer are not reproduced: every layer counts equally."""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

from ...core.registries import register_algorithm
from .base import Teacher, joined
from .replay import DistillingReplay

__all__ = ["LayerDistillation"]


@register_algorithm("layer_distill")
class LayerDistillation(DistillingReplay):
    """Experience replay plus MSE distillation of every layer's output from the model frozen
    at the end of the previous task.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        alpha: weight of the mean per-layer MSE.
        buffer_size: how many past samples are kept.
        minibatch_size: how many are replayed per step (None: the batch size).
        buffer_policy: 'reservoir', 'class_balanced' (CBRS) or 'greedy_balanced' (GDumb's sampler).
        seed: seeds the buffer's sampling (wired from the config's seed).
    """

    @functools.cached_property
    def teacher(self) -> Teacher:
        """The model frozen at the end of the previous task (empty before the first ends)."""
        return Teacher(self.model)

    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        self.teacher.freeze()

    def layer_loss(self, inputs: torch.Tensor) -> torch.Tensor:
        """Mean over layers of ``MSE(student layer, teacher layer)`` on ``inputs`` (every
        output ``returnt="full"`` gives, the backbone's blocks included)."""
        student = self.model(inputs, returnt="full")
        teacher = self.teacher(inputs, returnt="full")
        if len(student) != len(teacher):
            raise ValueError(f"student gives {len(student)} layers, teacher {len(teacher)}")
        return torch.stack([F.mse_loss(s, t) for s, t in zip(student, teacher, strict=True)]).mean()

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        past = self.replay(batch)
        loss = trainer.forward(joined(batch, past))["loss"]
        if past is not None and self.teacher:
            loss = loss + self.alpha * self.layer_loss(past["input"])
        self.remember(batch, {})
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "teacher": self.teacher.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.teacher.load_state_dict(state.get("teacher"))
