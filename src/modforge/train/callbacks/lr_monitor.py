"""``lr_monitor`` — the learning rate of each parameter group, logged every epoch."""

from __future__ import annotations

from typing import Any

from ...core.registries import register_callback
from .base import Callback


@register_callback("lr_monitor")
class LRMonitor(Callback):
    """Adds ``lr`` (first parameter group) and ``lr_groupN`` (the others) to each epoch's
    row: the rates of the epoch's last optimizer step. A schedule stepped every optimizer step
    (a warm-up) changes the rate within the epoch; the row shows the rate the epoch ended
    training at (its last step's). The rates are part of the checkpoint, so an epoch
    resumed half-way logs what an uninterrupted one logs."""

    order = 10
    rank_zero_only = True  # writes files / the terminal

    def __init__(self):
        self._next: list[float] = []  # the rates the next optimizer step will use
        self._used: list[float] = []  # the rates the last optimizer step of this epoch used

    def _current(self, trainer) -> list[float]:
        return [float(g["lr"]) for g in trainer.optimizer.param_groups]

    def on_epoch_start(self, trainer) -> None:
        if trainer.batch_in_epoch == 0 or not self._next:
            self._next, self._used = self._current(trainer), []

    def on_step_end(self, trainer) -> None:
        self._used, self._next = self._next, self._current(trainer)  # after the scheduler's step

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        for i, rate in enumerate(self._used or self._next):
            row["lr" if i == 0 else f"lr_group{i}"] = rate

    def state_dict(self) -> dict[str, Any]:
        return {"next": list(self._next), "used": list(self._used)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._next = list(state.get("next", state.get("rates", [])))  # "rates": before round 4
        self._used = list(state.get("used", []))
