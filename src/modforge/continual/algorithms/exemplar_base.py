"""Base of the class-incremental methods that keep *herding exemplars* and a teacher frozen from
an earlier task: ``icarl``, ``bic`` and ``lucir``.

What they share, said once here: the exemplar memory (``buffer_size`` over all classes, split
evenly; old classes keep their first exemplars, new ones are chosen by herding), a minibatch of
exemplars replayed with each batch (``minibatch_size``), the refusal of a task that repeats
classes, the old and new classes of the task under way, and all of that in checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..exemplars import ExemplarMemory
from .base import Algorithm, Teacher, joined
from .checks import at_least_one, check

__all__ = ["ExemplarAlgorithm"]


class ExemplarAlgorithm(Algorithm):
    """Herding exemplars, a teacher, and the classes old and new. Not registered itself: a
    subclass's signature holds the hyper-parameters (``buffer_size``, ``minibatch_size``,
    ``seed``...) and hands the memory it builds from them here.

    Attributes:
        name: the method's registered name, for its messages.
        memory: the exemplars (:class:`~modforge.continual.exemplars.ExemplarMemory`).
        teacher: the model frozen when the subclass says (:class:`~.base.Teacher`).
        old_classes: the classes before the current task.
        new_classes: the current task's classes.
    """

    name = "exemplars"
    uses_buffer = True
    settings = ("class-il",)

    def __init__(self, model: torch.nn.Module, num_classes: int | None, memory: ExemplarMemory,
                 minibatch_size: int | None):  # fmt: skip
        super().__init__(model, num_classes)
        check(at_least_one("minibatch_size", minibatch_size))
        self.memory = memory
        self.minibatch_size = minibatch_size
        self.teacher = Teacher(model)
        self.old_classes: list[int] = []  # the classes before the current task
        self.new_classes: list[int] = []  # the current task's classes

    # --------------------------------------------------------- task boundaries
    def begin_task(self, task: int, trainer: Any = None, classes: Sequence[int] = ()) -> None:
        """Refuse classes met in an earlier task; the classes seen so far become the old ones."""
        repeated = sorted({int(c) for c in classes} & set(self.seen_classes))
        if repeated:
            raise ValueError(f"{self.name} needs class-incremental tasks; task {task} repeats classes {repeated}")
        self.old_classes = list(self.seen_classes)
        super().begin_task(task, trainer, classes)
        self.new_classes = [c for c in self.seen_classes if c not in self.old_classes]

    def add_exemplars(self, data: dict[str, torch.Tensor], features: torch.Tensor) -> None:
        """Shrink every class to its share of the memory, then choose the exemplars of each class
        of ``data`` (``input``, ``label``) not in it yet by herding on ``features`` (a row each)."""
        share = self.memory.per_class(len(self.seen_classes))
        self.memory.shrink(share)
        for label in data["label"].unique().tolist():
            if label not in self.memory.exemplars:
                rows = data["label"] == label
                self.memory.add_class(label, data["input"][rows], features[rows], share)

    # ------------------------------------------------------------------- step
    def with_exemplars(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The batch joined with a minibatch of exemplars (the batch alone while there are none)."""
        past = self.draw(self.memory, self.minibatch_size or len(batch["label"]), batch["label"].device)
        return joined(batch, past)

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "memory": self.memory.state_dict(),
            "teacher": self.teacher.state_dict(),
            "old_classes": list(self.old_classes),
            "new_classes": list(self.new_classes),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.memory.load_state_dict(state["memory"])
        self.teacher.load_state_dict(state.get("teacher"))
        self.old_classes = [int(c) for c in state.get("old_classes", [])]
        self.new_classes = [int(c) for c in state.get("new_classes", [])]
