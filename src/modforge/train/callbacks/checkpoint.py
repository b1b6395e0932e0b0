"""``checkpoint`` — periodic checkpoints, ``last.pt`` and ``best.pt``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ...core.registries import register_callback
from .base import Callback, Mode, improved, monitored_value


@register_callback("checkpoint")
class Checkpoint(Callback):
    """Saves ``checkpoints/epochEEEE-stepSSSSSSS.pt`` every N epochs and/or every N steps,
    keeps the newest ``keep_last`` of them, keeps ``last.pt`` pointing at the newest and
    ``best.pt`` at the best by the monitored metric. A NaN metric is never best.

    Args:
        monitor: metric that decides ``best.pt`` (e.g. ``val_accuracy``); None: no best.
        mode: 'max', 'min', or 'auto' (from the metric's direction).
        every_n_epochs: save at the end of every N-th epoch (0: never by epoch).
        every_n_steps: also save every N optimizer steps, mid-epoch (None: never).
        keep_last: how many periodic checkpoints to keep (``last.pt``/``best.pt`` always stay).
    """

    order = 40

    def __init__(
        self,
        monitor: Optional[str] = None,
        mode: Mode = "auto",
        every_n_epochs: int = 1,
        every_n_steps: Optional[int] = None,
        keep_last: int = 3,
    ):
        if every_n_epochs < 0 or (every_n_steps is not None and every_n_steps < 1) or keep_last < 1:
            raise ValueError("every_n_epochs must be >= 0, every_n_steps >= 1 (or None), keep_last >= 1")
        self.monitor, self.mode = monitor, mode
        self.every_n_epochs, self.every_n_steps, self.keep_last = every_n_epochs, every_n_steps, keep_last
        self.best: float | None = None
        self.best_epoch: int | None = None
        # where the best weights were written (absolute): a run resumed into another folder
        # finds them there until it writes a better best.pt of its own
        self.best_file: str | None = None

    def on_step_end(self, trainer) -> None:
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0 and not trainer.epoch_finished:
            trainer.save_checkpoint(keep_last=self.keep_last)

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        is_best = False
        if self.monitor:
            value = monitored_value(row, self.monitor, "checkpoint")
            mode = trainer.direction(self.monitor) if self.mode == "auto" else self.mode
            if improved(value, self.best, mode):
                self.best, self.best_epoch, is_best = value, row["epoch"], True
                if trainer.run_dir is not None:
                    self.best_file = str((Path(trainer.run_dir) / "checkpoints" / "best.pt").resolve())
        periodic = self.every_n_epochs and row["epoch"] % self.every_n_epochs == 0
        if periodic or is_best or trainer.is_last_epoch:
            trainer.save_checkpoint(keep_last=self.keep_last, best=is_best)

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_epoch": self.best_epoch, "best_file": self.best_file}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch = state.get("best"), state.get("best_epoch")
        self.best_file = state.get("best_file")
