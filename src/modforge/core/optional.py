"""Optional packages (the pip extras of modforge), imported where used with one clear error."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import UsageError

__all__ = ["import_extra"]


def import_extra(package: str, what: str, extra: str) -> ModuleType:
    """Import an optional package, or say in one line which pip extra of modforge brings it.

    Raises:
        UsageError: ``package`` is not installed (or is installed but fails to import).
    """
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        broken = "" if exc.name in (package, None) else f" (it is installed, but importing it failed: {exc})"
        raise UsageError(f'{what} needs the {package} package{broken}: pip install "modforge[{extra}]"') from None
