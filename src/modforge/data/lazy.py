"""Names a package exports but imports only on first use (PEP 562's module ``__getattr__``).

Why: ``modforge.data`` and its sub-packages re-export classes whose modules pull in torch,
torchvision or Pillow; importing the package itself must stay cheap (``modforge predict``
reads audio for ONNX artifacts without torch), so each name is imported when it is first read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: name ``n`` is read from module ``where[n]`` (relative
    to ``package``) on first use; any other name is an AttributeError, as for a plain module."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name], package), name)

    return __getattr__
