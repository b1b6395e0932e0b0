"""``lr_monitor`` — the learning rate of each parameter group, logged every epoch."""

from __future__ import annotations

from typing import Any

from ...core.registries import register_callback
from .base import Callback


@register_callback("lr_monitor")
class LRMonitor(Callback):
    """Adds ``lr`` (first parameter group) and ``lr_groupN`` (the others) to each epoch's
    row: the rates used during that epoch."""

    order = 10

    def __init__(self):
        self._rates: list[float] = []

    def on_epoch_start(self, trainer) -> None:
        self._rates = [float(g["lr"]) for g in trainer.optimizer.param_groups]

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        for i, rate in enumerate(self._rates):
            row["lr" if i == 0 else f"lr_group{i}"] = rate
