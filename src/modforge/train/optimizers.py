"""Every ``torch.optim`` optimizer, registered under its lower-case class name.

``adamw``, ``sgd``, ``rmsprop``... take the same arguments as the torch classes (shown by
``modforge describe optimizer adamw``); the builder injects ``params``. Found by walking
``torch.optim`` rather than listing names, so a new torch release brings its new
optimizers along. ``SparseAdam`` is left out: it only works with sparse gradients,
which no modforge part produces.

Each is registered as a subclass that behaves exactly like the torch class but whose
signature declares the valid range of the common arguments (:data:`RANGES`), so an
infinite or negative learning rate, a negative weight decay (in ``param_groups`` too) or
a beta of 1 is refused when the config is validated, naming the key.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import torch
from pydantic import Field

from ..core.constraints import PositiveInt, Probability
from ..core.registries import OPTIMIZERS
from .ranges import constrained_class

__all__ = ["FLOAT32_MAX", "RANGES", "TORCH_OPTIMIZERS"]

_EXCLUDED = {"Optimizer", "SparseAdam"}
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
"""The largest number a float32 parameter can be multiplied by without becoming infinite."""

_Rate = Annotated[float, Field(gt=0, le=FLOAT32_MAX, allow_inf_nan=False)]
_Coefficient = Annotated[float, Field(ge=0, le=FLOAT32_MAX, allow_inf_nan=False)]
_Beta = Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]

RANGES: dict[str, Any] = {
    "lr": _Rate,
    "weight_decay": _Coefficient,
    "eps": _Coefficient,
    "momentum": _Coefficient,
    "dampening": _Coefficient,
    "lr_decay": _Coefficient,
    "initial_accumulator_value": _Coefficient,
    "momentum_decay": _Coefficient,
    "alpha": _Coefficient,
    "lambd": _Coefficient,
    "t0": _Coefficient,
    "rho": Probability,
    "betas": tuple[_Beta, _Beta],
    "max_iter": PositiveInt,
    "history_size": PositiveInt,
}
"""Argument name → its valid range, for every optimizer that has the argument: rates above
0, coefficients of at least 0 (both finite in float32), betas in [0, 1), ``rho`` in [0, 1]."""


def _torch_optimizers() -> dict[str, type]:
    found = {}
    for attr in dir(torch.optim):
        obj = getattr(torch.optim, attr)
        if inspect.isclass(obj) and issubclass(obj, torch.optim.Optimizer) and attr not in _EXCLUDED:
            found[attr.lower()] = obj
    return found


TORCH_OPTIMIZERS = _torch_optimizers()
for _name, _cls in sorted(TORCH_OPTIMIZERS.items()):
    OPTIMIZERS.add(constrained_class(_cls, RANGES), _name)
