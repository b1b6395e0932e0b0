"""Continual-learning evaluation: class-IL and task-IL accuracy, the accuracy matrix, and the
summaries computed from it.

* **class-IL** accuracy: the prediction is the argmax over every class seen so far (the
  model must also tell the tasks apart);
* **task-IL** accuracy: the task is given — logits outside the sample's task's classes are
  masked out before the argmax (Mammoth's ``mask_classes``);
* the **accuracy matrix** ``R[i][j]``: accuracy on task ``j``'s test set after training
  task ``i`` (``j ≤ i``; the upper triangle is empty);
* **average accuracy** — the mean of the last row; **learning accuracy** (Riemer et al.,
  2019) — the mean of the diagonal, each task's accuracy right after it was trained (how
  well the method still learns: the other side of forgetting); **forgetting** (Chaudhry et al., 2018) —
  over the tasks before the last, the mean drop from their best accuracy before the end
  to the final one; **backward transfer** (Lopez-Paz & Ranzato, 2017) — the mean of
  ``R[T−1][j] − R[j][j]`` over ``j < T−1`` (negative: forgetting); **forward transfer**
  (Lopez-Paz & Ranzato, 2017) — the mean of ``R[j−1][j] − b_j`` over ``j ≥ 1``: how much training
  the earlier tasks helps task ``j`` before it is seen, against ``b_j``, the accuracy of the model
  as it was before any training (randomly initialised, or as ``model.init`` loaded it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "AccuracyMatrix",
    "average_accuracy",
    "backward_transfer",
    "class_il_correct",
    "forgetting",
    "forward_transfer",
    "learning_accuracy",
    "mask_to_classes",
    "task_il_correct",
]


def mask_to_classes(logits: torch.Tensor, classes: Sequence[int]) -> torch.Tensor:
    """``logits`` with every column outside ``classes`` set to −inf."""
    keep = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    keep[torch.as_tensor(list(classes), device=logits.device)] = True
    return logits.masked_fill(~keep, float("-inf"))


def class_il_correct(logits: torch.Tensor, labels: torch.Tensor, seen_classes: int) -> int:
    """How many rows are right when predicting the argmax over the first ``seen_classes``
    classes (class-IL; domain-IL passes every class)."""
    return int((logits[:, :seen_classes].argmax(dim=-1) == labels).sum())


def task_il_correct(logits: torch.Tensor, labels: torch.Tensor, task_classes: Sequence[int]) -> int:
    """How many rows are right when the argmax is taken over their task's classes only."""
    return int((mask_to_classes(logits, task_classes).argmax(dim=-1) == labels).sum())


class AccuracyMatrix:
    """``R[i][j]`` filled row by row as tasks finish; rows are lists of accuracies (0..1)."""

    def __init__(self, rows: Sequence[Sequence[float]] = ()):
        self.rows = [list(map(float, row)) for row in rows]
        for i, row in enumerate(self.rows):
            if len(row) != i + 1:
                raise ValueError(f"row {i} of an accuracy matrix needs {i + 1} values (tasks 0..{i}), got {len(row)}")

    def add_row(self, accuracies: Sequence[float]) -> None:
        """The accuracies on tasks ``0..i`` after training task ``i`` (``i`` = rows so far)."""
        if len(accuracies) != len(self.rows) + 1:
            raise ValueError(f"after task {len(self.rows)} give {len(self.rows) + 1} accuracies, got {len(accuracies)}")
        self.rows.append([float(a) for a in accuracies])

    def __len__(self) -> int:
        return len(self.rows)

    def as_lists(self) -> list[list[float]]:
        return [list(row) for row in self.rows]


def average_accuracy(matrix: AccuracyMatrix) -> float:
    """Mean accuracy over every task after the last one was trained (NaN for an empty matrix)."""
    return sum(matrix.rows[-1]) / len(matrix.rows[-1]) if matrix.rows else math.nan


def learning_accuracy(matrix: AccuracyMatrix) -> float:
    """Mean of ``R[j][j]``: each task's accuracy just after training it (NaN for an empty matrix)."""
    return sum(row[j] for j, row in enumerate(matrix.rows)) / len(matrix) if matrix.rows else math.nan


def forgetting(matrix: AccuracyMatrix) -> float:
    """Mean over tasks ``j < T−1`` of ``max_{i<T−1} R[i][j] − R[T−1][j]`` (NaN with one task)."""
    if len(matrix) < 2:
        return math.nan
    last, earlier = matrix.rows[-1], matrix.rows[:-1]
    drops = [max(row[j] for row in earlier if len(row) > j) - last[j] for j in range(len(matrix) - 1)]
    return sum(drops) / len(drops)


def backward_transfer(matrix: AccuracyMatrix) -> float:
    """Mean over tasks ``j < T−1`` of ``R[T−1][j] − R[j][j]`` (NaN with one task)."""
    if len(matrix) < 2:
        return math.nan
    last = matrix.rows[-1]
    changes = [last[j] - matrix.rows[j][j] for j in range(len(matrix) - 1)]
    return sum(changes) / len(changes)


def forward_transfer(before_each: Sequence[float], initial: Sequence[float]) -> float:
    """Mean over tasks ``j ≥ 1`` of ``before_each[j − 1] − initial[j]``: ``before_each[j − 1]`` is
    ``R[j−1][j]``, task ``j``'s accuracy after training task ``j − 1`` (before task ``j``);
    ``initial[j]`` is task ``j``'s accuracy before any training. Only the tasks both lists
    cover count; NaN when none does."""
    pairs = [(before_each[j - 1], initial[j]) for j in range(1, min(len(before_each) + 1, len(initial)))]
    return sum(a - b for a, b in pairs) / len(pairs) if pairs else math.nan
