"""The installed packages' ``modforge.plugins`` entry points: which modules they name, and importing them.

:func:`modforge.core.plugins.load_entry_point_plugins` decides *when* (once per process);
this module does the work. ``MODFORGE_NO_ENTRY_POINTS=1`` skips them.
"""

from __future__ import annotations

import os
import sys

from .errors import PluginError
from .plugin_records import ENTRY_POINT_GROUP, LoadedPlugin, _remember


def _entry_point_modules() -> dict[str, str]:
    """Module of each installed ``modforge.plugins`` entry point → its distribution."""
    if os.environ.get("MODFORGE_NO_ENTRY_POINTS"):
        return {}
    from importlib.metadata import entry_points

    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed package"
        found[ep.module] = dist
    return found


def import_entry_points() -> list[str]:
    """Import every ``modforge.plugins`` entry point of the installed packages; their names.

    Raises:
        PluginError: an entry point failed to load; names the distribution and entry point.
    """
    from importlib.metadata import entry_points

    loaded = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed package"
        try:
            ep.load()
        except BaseException as exc:  # noqa: BLE001
            raise PluginError(
                f"plug-in entry point '{ep.name} = {ep.value}' of {dist} failed to load: "
                f"{type(exc).__name__}: {exc} (set MODFORGE_NO_ENTRY_POINTS=1 to skip entry points)"
            ) from exc
        _remember(LoadedPlugin(ep.module, sys.modules[ep.module], f"entry point '{ep.name}' of {dist}"))
        loaded.append(ep.name)
    return loaded


def _entry_point_covering(name: str) -> str | None:
    """Who vouches for module ``name`` when it is exactly an entry point's module."""
    dist = _entry_point_modules().get(name)
    return f"the '{ENTRY_POINT_GROUP}' entry point of {dist}" if dist is not None else None
