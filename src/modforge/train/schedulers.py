"""Every configurable ``torch.optim.lr_scheduler`` class, registered in snake case.

``StepLR`` → ``step_lr``, ``CosineAnnealingLR`` → ``cosine_annealing_lr``,
``ReduceLROnPlateau`` → ``reduce_lr_on_plateau``. The builder injects ``optimizer``.
Schedulers that need Python objects a YAML file cannot hold — ``LambdaLR`` and
``MultiplicativeLR`` (a function), ``SequentialLR`` and ``ChainedScheduler`` (other
scheduler objects) — are not registered.

Each is registered as a subclass that behaves exactly like the torch class but whose
signature declares the valid range of the common arguments (:data:`RANGES`), so a
negative ``step_size`` or a ``gamma`` of 0 is refused when the config is validated.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import torch

from ..core.constraints import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Probability
from ..core.registries import SCHEDULERS
from .ranges import constrained_class

__all__ = ["RANGES", "TORCH_SCHEDULERS", "snake_case"]

_EXCLUDED = {"LRScheduler", "_LRScheduler", "LambdaLR", "MultiplicativeLR", "SequentialLR", "ChainedScheduler"}

RANGES: dict[str, Any] = {
    "gamma": PositiveFloat,
    "step_size": PositiveInt,
    "T_max": PositiveInt,
    "T_0": PositiveInt,
    "T_mult": PositiveInt,
    "eta_min": NonNegativeFloat,
    "total_iters": NonNegativeInt,
    "factor": Probability,
    "start_factor": Probability,
    "end_factor": Probability,
    "patience": NonNegativeInt,
    "cooldown": NonNegativeInt,
    "threshold": NonNegativeFloat,
    "pct_start": Probability,
    "div_factor": PositiveFloat,
    "final_div_factor": PositiveFloat,
    "epochs": PositiveInt,
    "steps_per_epoch": PositiveInt,
    "step_size_up": PositiveInt,
}
"""Argument name → its valid range, for every scheduler that has the argument."""


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
    SCHEDULERS.add(constrained_class(_cls, RANGES), _name)
