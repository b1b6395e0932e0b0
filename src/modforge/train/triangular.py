"""``triangular`` — a learning rate that rises linearly to its peak, then falls linearly.

airbench's schedule (Keller Jordan's CIFAR-10 speed runs): from ``start_factor × lr`` at
step 0 up to ``lr`` at step ``int(peak × total_steps)``, then down to ``end_factor × lr`` at
``total_steps`` (airbench94: 0.2, 0.23, 0.07, stepped every optimizer step). Past the end
it stays at ``end_factor``.
"""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import LRScheduler

from ..core.constraints import PositiveInt, Probability
from ..core.registries import register_scheduler

__all__ = ["Triangular"]


@register_scheduler("triangular")
class Triangular(LRScheduler):
    """Linear rise from ``start_factor`` to 1 over the first ``peak`` of the schedule, linear
    fall to ``end_factor`` over the rest (factors of the base rate; ``total_steps`` in the unit
    ``train.scheduler.interval`` says — use ``step``).

    Args:
        optimizer: the optimizer (wired by the builder).
        total_steps: length of the schedule (wired by the trainer).
        start_factor: fraction of the base rate at step 0.
        peak: where the full rate is reached, as a fraction of the schedule.
        end_factor: fraction of the base rate at the end.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        total_steps: PositiveInt,
        start_factor: Probability = 0.2,
        peak: Probability = 0.23,
        end_factor: Probability = 0.07,
        last_epoch: int = -1,
    ):
        if total_steps < 1:
            raise ValueError(f"total_steps must be at least 1, got {total_steps}")
        for name, value in (("start_factor", start_factor), ("peak", peak), ("end_factor", end_factor)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        self.total_steps, self.peak_step = int(total_steps), int(peak * total_steps)
        self.start_factor, self.end_factor = float(start_factor), float(end_factor)
        super().__init__(optimizer, last_epoch)

    def factor(self, step: int) -> float:
        """The multiplier of the base learning rate at ``step``."""
        if step < self.peak_step:
            return self.start_factor + (1.0 - self.start_factor) * step / self.peak_step
        if step >= self.total_steps:
            return self.end_factor
        return 1.0 + (self.end_factor - 1.0) * (step - self.peak_step) / (self.total_steps - self.peak_step)

    def get_lr(self) -> list[float]:
        scale = self.factor(self.last_epoch)
        return [base * scale for base in self.base_lrs]
