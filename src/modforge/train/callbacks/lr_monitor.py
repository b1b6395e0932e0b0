"""``lr_monitor`` — the learning rate of each parameter group, logged every epoch."""

from __future__ import annotations

from typing import Any

from ...core.registries import register_callback
from .base import Callback


@register_callback("lr_monitor")
class LRMonitor(Callback):
    """Adds ``lr`` (first parameter group) and ``lr_groupN`` (the others) to each epoch's
    row: the rates in force when the epoch started. They are part of the checkpoint, so an
    epoch resumed half-way logs the rates it started with, not those of the resume point."""

    order = 10
    rank_zero_only = True  # writes files / the terminal

    def __init__(self):
        self._rates: list[float] = []

    def on_epoch_start(self, trainer) -> None:
        if trainer.batch_in_epoch == 0 or not self._rates:
            self._rates = [float(g["lr"]) for g in trainer.optimizer.param_groups]

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        for i, rate in enumerate(self._rates):
            row["lr" if i == 0 else f"lr_group{i}"] = rate

    def state_dict(self) -> dict[str, Any]:
        return {"rates": list(self._rates)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rates = list(state.get("rates", []))
