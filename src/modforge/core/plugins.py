"""Finding third-party parts without editing modforge — and importing nothing else.

A plug-in is a module whose import runs ``@register_*`` decorators. Importing is running
code, so *who named the module* decides whether it may be imported:

* **the user**: ``--plugins`` on any command, ``mf.load_plugins(...)`` in Python
  (:func:`load_plugin`). A module name, a ``.py`` file, a package folder, or a plain folder
  (which imports nothing: it vouches for the plug-in files inside it that configs name);
* **an installed package** declaring the ``modforge.plugins`` entry-point group (loaded
  once, the first time a registry is asked for its contents; ``MODFORGE_NO_ENTRY_POINTS=1``
  skips them);
* **a config file**, for what lies *beside it*: ``.py`` files and packages in the config's
  folder or below (:func:`load_config_plugins`, fed by :mod:`.config`, which records for each
  entry the folder it was found in). Every other entry of a config must already have been
  vouched for by one of the two routes above.

Never a plug-in, whoever names it: standard-library modules (``os``, ``subprocess``,
``builtins``...). A config stored inside a checkpoint or artifact is data, never code: it
vouches for nothing (:func:`require_plugins` says which plug-ins it needs).

A ``type:`` that is an import path (``my_pkg.parts:MyNet``) resolves only to a class or a
Python function *defined in* a loaded plug-in module (:func:`import_object`): it never
imports a module that is not a plug-in, and never reaches an object a plug-in merely
imported from elsewhere (``from os import system``).

Where things live: :mod:`.plugin_records` (what is loaded, and naming), :mod:`.plugin_importing`
(importing what was vouched for), :mod:`.plugin_configs` (a config's ``plugins:``),
:mod:`.plugin_copies` (a run folder's verified copies), :mod:`.plugin_entry_points` and
:mod:`.plugin_objects` (``type:`` import paths). This module keeps the user's route and the
once-per-process loading of entry points, and re-exports the rest.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from .errors import PluginError
from .plugin_configs import load_config_plugins, plugin_entries, require_plugins
from .plugin_copies import load_verified_copy
from .plugin_entry_points import import_entry_points
from .plugin_importing import _import_module, _import_path
from .plugin_objects import import_object, is_import_path
from .plugin_records import (
    _LOADED,  # noqa: F401 - the tests' registry snapshot saves and restores it through this module
    _TRUSTED_FOLDERS,
    ENTRY_POINT_GROUP,
    PLUGIN_MODULE_PREFIX,
    USER_ORIGIN,
    LoadedPlugin,
    _lock,
    _looks_like_file,
    _remember,
    _standard_library,
    loaded_plugin,
    loaded_plugins,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_MODULE_PREFIX",
    "USER_ORIGIN",
    "LoadedPlugin",
    "import_object",
    "is_import_path",
    "load_config_plugins",
    "load_entry_point_plugins",
    "load_plugin",
    "load_plugins",
    "load_verified_copy",
    "loaded_plugin",
    "loaded_plugins",
    "plugin_entries",
    "require_plugins",
]

_entry_points_loaded = False
"""Whether this process imported the entry points already (:func:`load_entry_point_plugins`)."""


def load_plugin(
    spec: str, *, base_dir: str | os.PathLike | None = None, origin: str = USER_ORIGIN
) -> ModuleType | None:
    """Import one plug-in the *user* names (``--plugins``, or Python code calling this).

    ``spec`` is a module name (``my_pkg.parts``), a ``.py`` file, a package folder (with
    ``__init__.py``; imported under its folder's name), or a plain folder: that imports
    nothing and returns ``None``, but lets configs name the plug-in files inside it.
    Loading the same plug-in twice returns the same module (no duplicate registrations).

    Raises:
        PluginError: a standard-library module, a missing file, or the import raised; the
            message names the plug-in, where it was named, and the cause.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(f"plug-in names must be non-empty strings, got {spec!r} (from {origin})")
    spec = spec.strip()
    if _looks_like_file(spec):
        path = Path(spec).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        path = path.resolve()
        if path.is_dir() and not (path / "__init__.py").is_file():
            with _lock:
                if path not in _TRUSTED_FOLDERS:
                    _TRUSTED_FOLDERS.append(path)
            return None
        if not path.exists():
            raise PluginError(f"plug-in file '{spec}' not found (looked for {path}; from {origin})")
        return _import_path(path, spec, origin).module
    if _standard_library(spec):
        raise PluginError(
            f"plug-in '{spec}' (from {origin}) is refused: it is a standard-library module, not a plug-in"
        )
    record = loaded_plugin(spec)
    if record is not None:
        return record.module
    return _remember(LoadedPlugin(spec, _import_module(spec, origin), origin)).module


def load_plugins(
    specs: Iterable[str] | None, *, base_dir: str | os.PathLike | None = None, origin: str = USER_ORIGIN
) -> list[ModuleType | None]:
    """Import several plug-ins the user names, in order (see :func:`load_plugin`)."""
    if specs is None:
        return []
    if isinstance(specs, str):
        specs = [specs]
    return [load_plugin(s, base_dir=base_dir, origin=origin) for s in specs]


def load_entry_point_plugins(*, force: bool = False) -> list[str]:
    """Import every ``modforge.plugins`` entry point of the installed packages, once.

    Returns the entry-point names loaded by this call.

    Raises:
        PluginError: an entry point failed to load; names the distribution and entry point.
    """
    global _entry_points_loaded
    with _lock:
        if (_entry_points_loaded and not force) or os.environ.get("MODFORGE_NO_ENTRY_POINTS"):
            return []
        _entry_points_loaded = True
        return import_entry_points()
