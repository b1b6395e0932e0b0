"""What a continual run measures while it trains: anytime accuracy and the stream's size.

* :class:`AnytimeAccuracy` — every ``eval_every`` optimizer steps, the accuracy on every task seen
  so far (the current one included), class-IL and task-IL, averaged over those tasks: the
  *anytime* curve of task-free / online continual learning (Koh et al., ICLR 2022; Mammoth's
  ``--eval_every``-style curves), not only the accuracy at task boundaries.
* :class:`StreamCounter` — the number of training samples each task's stream fed the model (the
  online setting's "each sample once" shows as task size × 1).

Both keep what they record in the continual trainer's ``continual`` state, which every
checkpoint holds, and run before the checkpoint callback at each hook — so a resumed run has
exactly the records an uninterrupted one has. Evaluation runs in eval mode on ordered loaders and
draws no random numbers: the training that follows is unchanged by it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...train import distributed
from ...train.callbacks.base import Callback

__all__ = ["AnytimeAccuracy", "StreamCounter"]


class AnytimeAccuracy(Callback):
    """Every ``every`` optimizer steps, ``evaluate(trainer, task)`` → ``(class_il_row, task_il_row)``
    over tasks ``0..task``; the means go to ``trainer.continual["anytime"]`` as
    ``{"step", "task", "class_il", "task_il"}`` (task 1-based)."""

    order = 30  # before the checkpoint (40): a checkpoint taken at this step includes the record

    def __init__(self, every: int, evaluate: Callable[[Any, int], tuple[list[float], list[float]]]):
        self.every, self.evaluate = int(every), evaluate

    def on_step_end(self, trainer: Any) -> None:
        if trainer.global_step % self.every:
            return
        task = max(0, int(trainer.algorithm.task))
        class_row, task_row = self.evaluate(trainer, task)
        trainer.continual.setdefault("anytime", []).append({
            "step": int(trainer.global_step), "task": task + 1,
            "class_il": sum(class_row) / len(class_row), "task_il": sum(task_row) / len(task_row),
        })  # fmt: skip


class StreamCounter(Callback):
    """Adds each epoch's consumed training samples (over every process) to ``trainer.continual["samples_seen"][task]``."""

    order = 30

    def __init__(self) -> None:
        self.consumed = 0

    def on_epoch_start(self, trainer: Any) -> None:
        self.consumed = trainer.rows_in_epoch  # a resumed epoch: what was trained on before

    def on_step_end(self, trainer: Any) -> None:
        self.consumed = trainer.rows_in_epoch

    def on_epoch_end(self, trainer: Any, row: dict[str, Any]) -> None:
        task = max(0, int(trainer.algorithm.task))
        seen = trainer.continual.setdefault("samples_seen", [])
        seen.extend([0] * (task + 1 - len(seen)))
        seen[task] += int(distributed.all_reduce_sum(torch.tensor(self.consumed), "counting the stream"))
        self.consumed = 0
