"""``whitening_init`` — set a frozen first convolution to whiten the training pictures' patches.

Why a callback at fit start, not a ``model.init`` entry: ``model.init`` loads weights from
files, before any data loader exists, and a model built for ``modforge test`` or ``export``
must not read the training split. The whitening filters depend on the training pictures as
the run's own loader delivers them (normalised, on the device, whichever data path the
config chose), and only once: at the start of a fresh run. A resumed run takes the filters
from its checkpoint (this callback's state says they were set), so resume stays exact.

The pictures are the first ``samples`` of the loader's first epoch (airbench: the first
5,000 training pictures, normalised). Drawing them leaves the data order untouched: the
loader's generator and the random number generators are put back afterwards. With the
config's augmentation in the loader the patches are the augmented pictures' — a crop with
padding adds a few border patches; the filters barely change.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from ...core.constraints import PositiveFloat, PositiveInt
from ...core.errors import ConfigError
from ...core.registries import register_callback
from ...model.whitening import whiten_conv_
from .base import Callback

if TYPE_CHECKING:  # pragma: no cover
    from ..trainer import Trainer

__all__ = ["WhiteningInit", "first_pictures"]

log = logging.getLogger("modforge.train")


def first_pictures(loader: Any, count: int, device: torch.device, key: str = "input") -> torch.Tensor:
    """The first ``count`` pictures (``batch[key]``) ``loader`` yields, concatenated on ``device``;
    the loader's generator and the global RNG states are restored afterwards."""
    generator = getattr(loader, "generator", None)
    state = generator.get_state() if generator is not None else None
    taken: list[torch.Tensor] = []
    have = 0
    try:
        with torch.random.fork_rng(devices=[]):
            for batch in loader:
                x = batch[key] if isinstance(batch, dict) else batch[0]
                taken.append(x[: count - have].to(device))
                have += len(taken[-1])
                if have >= count:
                    break
    finally:
        if state is not None:
            generator.set_state(state)
    if not taken:
        raise ConfigError("whitening_init: the training loader yields no batch", path="train.callbacks")
    return torch.cat(taken)


@register_callback("whitening_init")
class WhiteningInit(Callback):
    """Sets ``module`` (a Conv2d, e.g. the ``airbench`` backbone's ``whiten``) to the
    whitening filters of the training pictures' patches before the first step.

    Args:
        module: the convolution's name in the model (``parts.backbone.whiten``).
        samples: how many training pictures the patch statistics come from.
        eps: added to each eigenvalue before its square root (bounds the gain of flat directions).
    """

    order = 5  # after lookahead (order 4) copied the network as built, as airbench orders them

    def __init__(
        self,
        module: str = "parts.backbone.whiten",
        samples: PositiveInt = 5000,
        eps: PositiveFloat = 5e-4,
    ):
        self.module, self.samples, self.eps = module, int(samples), float(eps)
        self.done = False

    def on_fit_start(self, trainer: Trainer) -> None:
        if self.done:  # a resumed run: the filters are in the checkpoint's weights
            return
        try:
            conv = trainer.model.get_submodule(self.module)
        except AttributeError:
            convs = [name for name, m in trainer.model.named_modules() if isinstance(m, nn.Conv2d)][:5]
            raise ConfigError(f"whitening_init: the model has no module '{self.module}' (its first convolutions: "
                              f"{', '.join(convs) or 'none'})", path="train.callbacks") from None  # fmt: skip
        loader = getattr(trainer, "train_loader", None)
        if loader is None:
            raise ConfigError("whitening_init needs the training loader: it runs inside Trainer.fit",
                              path="train.callbacks")  # fmt: skip
        pictures = first_pictures(loader, self.samples, conv.weight.device)
        try:
            whiten_conv_(conv, pictures, eps=self.eps)
        except ValueError as exc:
            raise ConfigError(f"whitening_init of '{self.module}': {exc}", path="train.callbacks") from None
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.broadcast(conv.weight.data, src=0)  # each process saw its own shard: rank 0's filters
        log.info("whitening_init: %s set from %d training pictures", self.module, len(pictures))
        self.done = True

    def state_dict(self) -> dict[str, Any]:
        return {"done": self.done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.done = bool(state.get("done", False))
