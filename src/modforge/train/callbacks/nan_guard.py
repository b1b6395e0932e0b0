"""``nan_guard`` — stop at the first non-finite loss; never save a NaN model."""

from __future__ import annotations

from typing import Optional

from ...core.registries import register_callback
from .base import Callback


@register_callback("nan_guard")
class NaNGuard(Callback):
    """Checks the running training loss every ``check_every`` steps, at every epoch end (the
    trainer does that one, before it clears the epoch's losses and before the epoch's
    checkpoint) and before every checkpoint; a NaN/Inf stops training with a clear message.
    The check reads the epoch's on-device loss sum (a NaN anywhere makes it NaN), so it adds
    no per-step synchronisation; the last good checkpoint is kept untouched.

    Args:
        check_every: steps between checks (None: the trainer's ``log_every``).
    """

    order = 0

    def __init__(self, check_every: Optional[int] = None):
        self.check_every = check_every

    def on_fit_start(self, trainer) -> None:
        trainer.guard_nonfinite = True
        if self.check_every is None:
            self.check_every = trainer.log_every

    def on_step_end(self, trainer) -> None:
        if self.check_every and trainer.global_step % self.check_every == 0:
            trainer.check_finite()

