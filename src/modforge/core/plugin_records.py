"""The plug-in bookkeeping: which plug-ins are loaded, who vouched for each, and how entries are named.

Every route that imports a plug-in (:mod:`.plugins`, :mod:`.plugin_configs`, :mod:`.plugin_copies`)
records it here, so a plug-in is imported once and :func:`loaded_plugin` answers for all of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_MODULE_PREFIX",
    "USER_ORIGIN",
    "LoadedPlugin",
    "loaded_plugin",
    "loaded_plugins",
]

ENTRY_POINT_GROUP = "modforge.plugins"
USER_ORIGIN = "--plugins"
"""The origin of what the user names on the command line (``load_plugin``'s default)."""
PLUGIN_MODULE_PREFIX = "modforge_plugin_"
"""Module names given to ``.py`` plug-in files (they are not importable by name)."""
_lock = threading.RLock()


@dataclasses.dataclass(frozen=True)
class LoadedPlugin:
    """A plug-in that was imported because someone entitled to vouched for it.

    Attributes:
        entry: the plug-in as configs name it: a module name, or the absolute path of a
            ``.py`` file or package folder.
        module: the imported module.
        origin: who vouched for it (``--plugins``, ``beside configs/x.yaml``...).
        path: the file or package folder it was imported from (``None`` for an installed module).
    """

    entry: str
    module: ModuleType
    origin: str
    path: Path | None = None

    @property
    def current(self) -> bool:
        """Still the module Python has under that name (tests may unload plug-ins)."""
        return sys.modules.get(self.module.__name__) is self.module


_LOADED: dict[str, LoadedPlugin] = {}
_TRUSTED_FOLDERS: list[Path] = []


def loaded_plugin(entry: str) -> LoadedPlugin | None:
    """The record of plug-in ``entry`` (module name or file/folder path), if it was loaded."""
    record = _LOADED.get(_normal(entry))
    return record if record is not None and record.current else None


def loaded_plugins() -> list[LoadedPlugin]:
    """Every plug-in loaded so far (each once)."""
    seen: dict[int, LoadedPlugin] = {}
    for record in list(_LOADED.values()):
        if record.current:
            seen.setdefault(id(record), record)
    return list(seen.values())


def _remember(record: LoadedPlugin, *aliases: str) -> LoadedPlugin:
    with _lock:
        for key in {record.entry, *aliases}:
            _LOADED[key] = record
    return record


# ----------------------------------------------------------------- naming
def _looks_like_file(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or (os.altsep is not None and os.altsep in spec)


def _normal(entry: str) -> str:
    """Paths absolute and resolved; module names as given."""
    entry = entry.strip()
    return str(Path(entry).expanduser().resolve()) if _looks_like_file(entry) else entry


def _module_name_for_file(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"{PLUGIN_MODULE_PREFIX}{stem}_{digest}"


def _standard_library(name: str) -> bool:
    top = name.split(".", 1)[0]
    return top in sys.stdlib_module_names or top in sys.builtin_module_names


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True
