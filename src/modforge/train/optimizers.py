"""Every ``torch.optim`` optimizer, registered under its lower-case class name.

``adamw``, ``sgd``, ``rmsprop``... take the same arguments as the torch classes (shown by
``modforge describe optimizer adamw``); the builder injects ``params``. Found by walking
``torch.optim`` rather than listing names, so a new torch release brings its new
optimizers along. ``SparseAdam`` is left out: it only works with sparse gradients,
which no modforge part produces.
"""

from __future__ import annotations

import inspect

import torch

from ..core.registries import OPTIMIZERS

_EXCLUDED = {"Optimizer", "SparseAdam"}


def _torch_optimizers() -> dict[str, type]:
    found = {}
    for attr in dir(torch.optim):
        obj = getattr(torch.optim, attr)
        if inspect.isclass(obj) and issubclass(obj, torch.optim.Optimizer) and attr not in _EXCLUDED:
            found[attr.lower()] = obj
    return found


TORCH_OPTIMIZERS = _torch_optimizers()
for _name, _cls in sorted(TORCH_OPTIMIZERS.items()):
    OPTIMIZERS.add(_cls, _name)
