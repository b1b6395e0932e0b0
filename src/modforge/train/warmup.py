"""``warmup_cosine`` — linear warm-up, then cosine decay to a floor."""

from __future__ import annotations

import logging
import math

import torch
from torch.optim.lr_scheduler import LRScheduler

from ..core.constraints import NonNegativeInt, PositiveInt, Probability
from ..core.registries import register_scheduler

log = logging.getLogger("modforge.train")


@register_scheduler("warmup_cosine")
class WarmupCosine(LRScheduler):
    """Learning rate rises linearly from ``start_factor × lr`` to ``lr`` over ``warmup``
    steps, then follows a half cosine down to ``min_factor × lr`` at ``total_steps``
    (and stays there). "Steps" are epochs or optimizer steps, as the config's
    ``train.scheduler.interval`` says; ``total_steps`` is wired by the trainer to match.

    A warm-up longer than the run (``warmup: 2`` in a one-epoch run) is shortened to
    ``total_steps - 1`` (the last step at the full rate), with one warning: a config keeps
    working with any epoch count.

    Args:
        optimizer: the optimizer (wired by the builder).
        total_steps: length of the schedule (wired by the trainer).
        warmup: warm-up length, in the same unit.
        start_factor: fraction of the base rate at step 0.
        min_factor: fraction of the base rate at the end.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        total_steps: PositiveInt,
        warmup: NonNegativeInt = 0,
        start_factor: Probability = 0.0,
        min_factor: Probability = 0.0,
        last_epoch: int = -1,
    ):
        if total_steps < 1 or warmup < 0:
            raise ValueError(f"need warmup ({warmup}) >= 0 and total_steps ({total_steps}) >= 1")
        if warmup >= total_steps:  # the last step (or the only one) at the full rate
            shortened = total_steps - 1
            what = ("so the whole schedule runs at the full rate" if shortened == 0 else
                    f"so the rate rises from {start_factor:g}× over the first {shortened} and reaches the full rate "
                    "only at the last")  # fmt: skip
            log.warning("warmup_cosine: warmup (%d) is not shorter than the schedule (%d epochs or optimizer steps, "
                        "as train.scheduler.interval says); shortened to %d, %s", warmup, total_steps, shortened, what)  # fmt: skip
            warmup = shortened
        if not 0.0 <= start_factor <= 1.0 or not 0.0 <= min_factor <= 1.0:
            raise ValueError("start_factor and min_factor must be in [0, 1]")
        self.total_steps, self.warmup = total_steps, warmup
        self.start_factor, self.min_factor = start_factor, min_factor
        super().__init__(optimizer, last_epoch)

    def factor(self, step: int) -> float:
        """The multiplier of the base learning rate at ``step``."""
        if step < self.warmup:
            return self.start_factor + (1.0 - self.start_factor) * step / self.warmup
        span = max(1, self.total_steps - self.warmup)
        progress = min(1.0, (step - self.warmup) / span)
        return self.min_factor + (1.0 - self.min_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def get_lr(self) -> list[float]:
        scale = self.factor(self.last_epoch)
        return [base * scale for base in self.base_lrs]

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore the position in the schedule, but keep this run's plan: a run resumed with
        more epochs (``--resume RUN train.max_epochs=80``) re-plans the cosine for its new
        length — restoring the old ``total_steps`` would train the added epochs at the end
        rate (0 by default) — with one warning. An unchanged run resumes exactly."""
        planned = {key: getattr(self, key) for key in ("total_steps", "warmup")}
        stored = {key: state_dict.get(key, value) for key, value in planned.items()}
        super().load_state_dict(state_dict)
        self.__dict__.update(planned)
        if stored != planned:
            rates = self.get_lr()  # the current step's rate on the new plan (the optimizer, loaded first, holds the old)
            for group, rate in zip(self.optimizer.param_groups, rates, strict=True):
                group["lr"] = rate
            self._last_lr = rates
            log.warning("warmup_cosine: the run was planned for %d steps (warmup %d) and now has %d (warmup %d): "
                        "the schedule continues on the new plan", stored["total_steps"], stored["warmup"],
                        planned["total_steps"], planned["warmup"])  # fmt: skip
