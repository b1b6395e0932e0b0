"""``warmup_cosine`` — linear warm-up, then cosine decay to a floor, counted in optimizer steps.

The schedule always moves once per optimizer step, whatever the config's unit: with
``interval: epoch`` its ``warmup`` is a number of epochs (fractions allowed: ``warmup: 0.5``)
that the trainer converts to optimizer steps (``warmup_unit`` = steps in an epoch), and the
cosine is planned over the run's optimizer steps. A rate held for a whole epoch would turn a
one-epoch warm-up from ``start_factor: 0`` into an epoch that learns nothing — the shipped
configs did that until round 4 (train loss 2.43 and chance accuracy after the first epoch).
The first optimizer step already runs at ``start_factor + (1 − start_factor) / warmup`` of the
rate — never at 0 — and the last warm-up step at the full rate (timm, Lightning and mmengine
warm up per step too; Hugging Face's linear warm-up spends its first step at 0).
"""

from __future__ import annotations

import logging
import math

import torch
from torch.optim.lr_scheduler import LRScheduler

from ..core.constraints import NonNegativeFloat, PositiveInt, Probability
from ..core.registries import register_scheduler

log = logging.getLogger("modforge.train")


@register_scheduler("warmup_cosine")
class WarmupCosine(LRScheduler):
    """Learning rate rises linearly from ``start_factor × lr`` to ``lr`` over ``warmup``
    epochs or optimizer steps (as ``train.scheduler.interval`` says), then follows a half
    cosine down to ``min_factor × lr`` at the end of the run and stays there. It is stepped
    after every optimizer step either way (see the module's docstring).

    A warm-up longer than the run (``warmup: 2`` in a one-epoch run) is shortened to the
    run's steps minus one (the last step at the full rate), with one warning: a config keeps
    working with any epoch count.

    Args:
        optimizer: the optimizer (wired by the builder).
        total_steps: the run's optimizer steps (wired by the trainer).
        warmup: warm-up length in the config's unit (epochs with ``interval: epoch``).
        start_factor: fraction of the base rate the warm-up rises from.
        min_factor: fraction of the base rate at the end.
        warmup_unit: optimizer steps per unit of ``warmup`` (wired by the trainer: the steps
            of an epoch with ``interval: epoch``, 1 with ``interval: step``).
    """

    counts_optimizer_steps = True
    """Tells the trainer to step this schedule every optimizer step (``interval: epoch`` only
    names the unit of ``warmup``)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        total_steps: PositiveInt,
        warmup: NonNegativeFloat = 0,
        start_factor: Probability = 0.0,
        min_factor: Probability = 0.0,
        warmup_unit: PositiveInt = 1,
        last_epoch: int = -1,
    ):
        if total_steps < 1 or warmup < 0 or warmup_unit < 1:
            raise ValueError(f"need warmup ({warmup}) >= 0, total_steps ({total_steps}) >= 1 and "
                             f"warmup_unit ({warmup_unit}) >= 1")  # fmt: skip
        if not 0.0 <= start_factor <= 1.0 or not 0.0 <= min_factor <= 1.0:
            raise ValueError("start_factor and min_factor must be in [0, 1]")
        steps = round(warmup * warmup_unit)
        if warmup > 0 and steps == 0:
            steps = 1
        if steps >= total_steps:  # the last step (or the only one) at the full rate
            shortened = total_steps - 1
            what = ("so the whole schedule runs at the full rate" if shortened == 0 else
                    f"so the rate rises from {start_factor:g}× over the first {shortened} and reaches the full rate "
                    "only at the last")  # fmt: skip
            log.warning("warmup_cosine: warmup (%s) is not shorter than the run (%d optimizer steps); "
                        "shortened to %d optimizer steps, %s", _steps_text(warmup, warmup_unit), total_steps, shortened,
                        what)  # fmt: skip
            steps = shortened
        self.total_steps, self.warmup, self.warmup_unit = total_steps, steps, warmup_unit
        self.start_factor, self.min_factor = start_factor, min_factor
        super().__init__(optimizer, last_epoch)

    @property
    def follows_epochs(self) -> bool:
        """The config counts epochs: resumed by another number of processes (another number of
        steps per epoch), the schedule carries its position over in epochs."""
        return self.warmup_unit > 1

    def factor(self, step: int) -> float:
        """The multiplier of the base learning rate for optimizer step ``step`` (0-based)."""
        if step < self.warmup:
            return self.start_factor + (1.0 - self.start_factor) * (step + 1) / self.warmup
        span = max(1, self.total_steps - self.warmup)
        progress = min(1.0, (step - self.warmup) / span)
        return self.min_factor + (1.0 - self.min_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def get_lr(self) -> list[float]:
        scale = self.factor(self.last_epoch)
        return [base * scale for base in self.base_lrs]

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore the position in the schedule, but keep this run's plan.

        A run resumed with more epochs (``--resume RUN train.max_epochs=80``) re-plans the
        cosine for its new length — restoring the old ``total_steps`` would train the added
        epochs at the end rate (0 by default). A run resumed by another number of processes
        has another number of steps per epoch: the position is carried over in epochs.
        Checkpoints from before round 4 counted epochs (no ``warmup_unit``): their position
        is converted the same way. Each change is said in one warning; an unchanged run
        resumes exactly.
        """
        planned = {key: getattr(self, key) for key in ("total_steps", "warmup", "warmup_unit")}
        stored = {key: state_dict.get(key, 1 if key == "warmup_unit" else value) for key, value in planned.items()}
        super().load_state_dict(state_dict)
        self.__dict__.update(planned)
        if stored == planned:
            return
        if stored["warmup_unit"] != planned["warmup_unit"]:
            self.last_epoch = round(self.last_epoch * planned["warmup_unit"] / stored["warmup_unit"])
        rates = self.get_lr()  # the current step's rate on the new plan (the optimizer, loaded first, holds the old)
        for group, rate in zip(self.optimizer.param_groups, rates, strict=True):
            group["lr"] = rate
        self._last_lr = rates
        log.warning("warmup_cosine: the run was planned for %s and now has %s: the schedule continues on the new plan "
                    "from optimizer step %d", _plan_text(stored), _plan_text(planned), self.last_epoch)  # fmt: skip


def _steps_text(warmup: float, unit: int) -> str:
    return f"{warmup:g} epoch(s) of {unit} optimizer steps" if unit > 1 else f"{warmup:g} optimizer steps"


def _plan_text(plan: dict[str, int]) -> str:
    per_epoch = f", {plan['warmup_unit']} per epoch" if plan["warmup_unit"] > 1 else ""
    return f"{plan['total_steps']} optimizer steps (warm-up {plan['warmup']}{per_epoch})"
