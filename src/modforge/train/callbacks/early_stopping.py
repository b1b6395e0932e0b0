"""``early_stopping`` — stop when the monitored metric stops improving."""

from __future__ import annotations

import logging
from typing import Any, Optional

from ...core.constraints import NonNegativeFloat, NonNegativeInt
from ...core.registries import register_callback
from .base import Callback, Mode, improved, monitored_value

log = logging.getLogger("modforge.train")


@register_callback("early_stopping")
class EarlyStopping(Callback):
    """Stops training after ``patience`` consecutive evaluations without an improvement
    of more than ``min_delta`` (a NaN counts as no improvement).

    Args:
        monitor: the metric to watch (default: the config's ``train.monitor``).
        mode: 'max', 'min', or 'auto' (from the metric's direction).
        patience: the number of consecutive evaluations without improvement that stops
            training (0 and 1 both stop at the first one).
        min_delta: the smallest change that counts as an improvement.
    """

    order = 20

    def __init__(
        self, monitor: Optional[str] = None, mode: Mode = "auto", patience: NonNegativeInt = 5,
        min_delta: NonNegativeFloat = 0.0,
    ):  # fmt: skip
        if patience < 0 or min_delta < 0:
            raise ValueError(f"patience and min_delta must not be negative, got {patience} and {min_delta}")
        if monitor is None:
            raise ValueError("early_stopping needs a metric to monitor (args.monitor or train.monitor)")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, min_delta
        self.best: float | None = None
        self.bad_evaluations = 0
        self.stopped_epoch: int | None = None

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        value = monitored_value(row, self.monitor, "early_stopping")
        mode = trainer.direction(self.monitor) if self.mode == "auto" else self.mode
        if improved(value, self.best, mode, self.min_delta):
            self.best, self.bad_evaluations = value, 0
            return
        self.bad_evaluations += 1
        if self.bad_evaluations >= max(self.patience, 1):
            self.stopped_epoch = row["epoch"]
            best = "none yet" if self.best is None else f"{self.best:.6g}"
            trainer.request_stop(
                f"early stopping: {self.monitor} did not improve for {self.bad_evaluations} evaluation(s) (best {best})"
            )

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad_evaluations": self.bad_evaluations, "stopped_epoch": self.stopped_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state.get("best")
        self.bad_evaluations = state.get("bad_evaluations", 0)
        self.stopped_epoch = state.get("stopped_epoch")
