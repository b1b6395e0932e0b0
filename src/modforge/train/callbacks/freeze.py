"""``freeze_parameters`` — train some parameters only for the first epochs.

airbench trains the bias of its whitening layer for the first 3 epochs and then leaves it
fixed (``whiten_bias_epochs``). Here the parameters whose names match ``names`` have
``requires_grad`` on during epochs ``0 … from_epoch − 1`` and off after: without a gradient
the optimizer leaves them alone (no step, no weight decay). It is decided at the start of
every epoch from the epoch number, so a resumed run is in the same state as one that never
stopped. In a multi-process run set ``train.distributed.find_unused_parameters: true``: the
frozen parameters then get no gradient for DistributedDataParallel to average.
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

import torch

from ...core.constraints import NonNegativeInt
from ...core.errors import ConfigError
from ...core.registries import register_callback
from .base import Callback

if TYPE_CHECKING:  # pragma: no cover
    from ..trainer import Trainer

__all__ = ["FreezeParameters"]


@register_callback("freeze_parameters")
class FreezeParameters(Callback):
    """Stops training the parameters named by ``names`` from epoch ``from_epoch`` on.

    Args:
        names: shell patterns on the model's parameter names (``parts.backbone.whiten.bias``).
        from_epoch: the first epoch (counted from 0) in which they are frozen.
    """

    order = 3

    def __init__(self, names: list[str], from_epoch: NonNegativeInt = 0):
        if not names:
            raise ValueError("names must list at least one parameter name or pattern")
        self.names, self.from_epoch = list(names), int(from_epoch)
        self._params: list[torch.nn.Parameter] | None = None

    def _selected(self, trainer: Trainer) -> list[torch.nn.Parameter]:
        if self._params is None:
            named = list(trainer.model.named_parameters())
            chosen = [p for n, p in named if any(fnmatch.fnmatchcase(n, pat) for pat in self.names)]
            if not chosen:
                shown = ", ".join(n for n, _ in named[:6])
                raise ConfigError(f"freeze_parameters: no parameter matches {self.names} (the model's first: {shown})",
                                  path="train.callbacks")  # fmt: skip
            self._params = chosen
        return self._params

    def on_epoch_start(self, trainer: Trainer) -> None:
        train = trainer.epoch < self.from_epoch
        for param in self._selected(trainer):
            param.requires_grad_(train)
