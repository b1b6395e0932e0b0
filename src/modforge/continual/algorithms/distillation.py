"""``lwf`` — Learning without Forgetting (Li & Hoiem, ECCV 2016 / TPAMI 2017): at the end of
each task the model is frozen as a teacher; while learning the next tasks the student's
logits on the classes seen before are distilled towards the teacher's on the *current*
inputs (temperature-softened KL, scaled by T² as in Hinton et al.) — no stored data."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat, PositiveFloat
from ...core.registries import register_algorithm
from .base import Algorithm, Teacher
from .checks import check, non_negative, positive

__all__ = ["LwF"]


@register_algorithm("lwf")
class LwF(Algorithm):
    """Learning without Forgetting.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        alpha: weight of the distillation term.
        temperature: softmax temperature of teacher and student (T; the term is scaled by T²).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        alpha: NonNegativeFloat = 1.0,
        temperature: PositiveFloat = 2.0,
    ):
        super().__init__(model, num_classes)
        check(non_negative("alpha", alpha), positive("temperature", temperature))
        self.alpha, self.temperature = alpha, temperature
        self.teacher = Teacher(model)
        self.old_classes: list[int] = []

    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        self.teacher.freeze()
        self.old_classes = list(self.seen_classes)

    def distillation(self, student_logits: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """``T² · KL(softmax(teacher/T) ‖ softmax(student/T))`` over the old classes."""
        t, cols = self.temperature, torch.as_tensor(self.old_classes, device=student_logits.device)
        teacher_logits = self.teacher({"input": inputs})["logits"].index_select(1, cols)
        student = F.log_softmax(student_logits.index_select(1, cols) / t, dim=1)
        return F.kl_div(student, F.softmax(teacher_logits / t, dim=1), reduction="batchmean") * t * t

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        out = trainer.forward(batch)
        if not self.teacher or not self.old_classes:
            return out["loss"]
        return out["loss"] + self.alpha * self.distillation(out["logits"], batch["input"])

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "teacher": self.teacher.state_dict(), "old_classes": list(self.old_classes)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.old_classes = [int(c) for c in state.get("old_classes", [])]
        self.teacher.load_state_dict(state.get("teacher"))
