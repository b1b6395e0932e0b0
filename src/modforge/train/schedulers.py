"""Every configurable ``torch.optim.lr_scheduler`` class, registered in snake case.

``StepLR`` → ``step_lr``, ``CosineAnnealingLR`` → ``cosine_annealing_lr``,
``ReduceLROnPlateau`` → ``reduce_lr_on_plateau``. The builder injects ``optimizer``.
Schedulers that need Python objects a YAML file cannot hold — ``LambdaLR`` and
``MultiplicativeLR`` (a function), ``SequentialLR`` and ``ChainedScheduler`` (other
scheduler objects) — are not registered.
"""

from __future__ import annotations

import inspect
import re

import torch

from ..core.registries import SCHEDULERS

_EXCLUDED = {"LRScheduler", "_LRScheduler", "LambdaLR", "MultiplicativeLR", "SequentialLR", "ChainedScheduler"}


def snake_case(name: str) -> str:
    """``ReduceLROnPlateau`` → ``reduce_lr_on_plateau``; ``OneCycleLR`` → ``one_cycle_lr``."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return name.lower()


def _torch_schedulers() -> dict[str, type]:
    module = torch.optim.lr_scheduler
    base = getattr(module, "LRScheduler", None) or module._LRScheduler  # noqa: SLF001 - torch < 2.0 name
    found = {}
    for attr in dir(module):
        obj = getattr(module, attr)
        if not inspect.isclass(obj) or attr in _EXCLUDED or attr.startswith("_"):
            continue
        if issubclass(obj, base) or attr == "ReduceLROnPlateau":
            found[snake_case(attr)] = obj
    return found


TORCH_SCHEDULERS = _torch_schedulers()
for _name, _cls in sorted(TORCH_SCHEDULERS.items()):
    SCHEDULERS.add(_cls, _name)
