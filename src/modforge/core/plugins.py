"""Finding third-party parts without editing modforge.

Three ways, all ending in "import a module so its ``@register_*`` decorators run":

* the ``modforge.plugins`` entry-point group of installed packages, loaded once, the
  first time any registry is asked for its contents (set ``MODFORGE_NO_ENTRY_POINTS=1``
  to skip them, e.g. to work around a broken third-party package);
* a ``plugins:`` list in a config: module names or ``.py`` paths relative to that file;
* ``--plugins`` on every command: module names or ``.py`` paths relative to the cwd.

A config's ``type:`` may also name an object by import path (``my_pkg.parts:MyNet``),
but only inside a module the user listed as a plug-in — so a config file alone can
never make modforge import arbitrary code.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import PluginError, UnknownComponentError

__all__ = [
    "ENTRY_POINT_GROUP",
    "import_object",
    "is_import_path",
    "load_entry_point_plugins",
    "load_plugin",
    "load_plugins",
]

ENTRY_POINT_GROUP = "modforge.plugins"
PLUGIN_MODULE_PREFIX = "modforge_plugin_"
"""Module names given to ``.py`` plug-in files (they are not importable by name)."""
_entry_points_loaded = False
_entry_points_lock = threading.RLock()


def _looks_like_file(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or (os.altsep is not None and os.altsep in spec)


def _module_name_for_file(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"{PLUGIN_MODULE_PREFIX}{stem}_{digest}"


def load_plugin(spec: str, *, base_dir: str | os.PathLike | None = None, origin: str = "--plugins") -> ModuleType:
    """Import one plug-in: a module name (``my_pkg.parts``) or a ``.py`` file path.

    A file is imported under a stable private module name, so loading the same file
    twice returns the same module and does not register its parts twice.

    Args:
        spec: module name or file path.
        base_dir: directory that relative file paths are resolved against.
        origin: where the plug-in was named, for the error message
            (``--plugins``, ``plugins: in configs/x.yaml``, ``entry point ...``).

    Raises:
        PluginError: the file does not exist or the import raised; the message names
            the plug-in, where it was listed, and the cause.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(f"plug-in names must be non-empty strings, got {spec!r} (from {origin})")
    spec = spec.strip()
    if _looks_like_file(spec):
        path = Path(spec).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        path = path.resolve()
        if not path.is_file():
            raise PluginError(f"plug-in file '{spec}' not found (looked for {path}; from {origin})")
        name = _module_name_for_file(path)
        if name in sys.modules:
            return sys.modules[name]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise PluginError(f"plug-in file '{spec}' cannot be imported as Python (from {origin})")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except PluginError:
            sys.modules.pop(name, None)
            raise
        except BaseException as exc:  # noqa: BLE001 - reported, with the cause chained
            sys.modules.pop(name, None)
            raise PluginError(
                f"plug-in '{spec}' (from {origin}) failed to import: {type(exc).__name__}: {exc}"
            ) from exc
        return module
    try:
        return importlib.import_module(spec)
    except PluginError:
        raise
    except BaseException as exc:  # noqa: BLE001
        raise PluginError(f"plug-in '{spec}' (from {origin}) failed to import: {type(exc).__name__}: {exc}") from exc


def load_plugins(
    specs: Iterable[str] | None, *, base_dir: str | os.PathLike | None = None, origin: str = "--plugins"
) -> list[ModuleType]:
    """Import several plug-ins in order (see :func:`load_plugin`)."""
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
    with _entry_points_lock:
        if (_entry_points_loaded and not force) or os.environ.get("MODFORGE_NO_ENTRY_POINTS"):
            return []
        _entry_points_loaded = True
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
            loaded.append(ep.name)
        return loaded


def is_import_path(name: str) -> bool:
    """True when a ``type:`` value is an import path (``pkg.mod:Obj`` or ``pkg.mod.Obj``)."""
    return ":" in name or "." in name


def _split_import_path(name: str) -> tuple[str, str]:
    if ":" in name:
        module, _, attr = name.rpartition(":")
    else:
        module, _, attr = name.rpartition(".")
    return module, attr


def _listed(module: str, allowed: Iterable[str]) -> str | None:
    """The plug-in entry that covers ``module`` (itself or a parent package), if any."""
    for entry in allowed:
        if module == entry or module.startswith(entry + "."):
            return entry
    return None


def import_object(
    name: str,
    *,
    kind: str,
    allowed_modules: Iterable[str] = (),
    base_dir: str | os.PathLike | None = None,
    path: str | None = None,
    source: str | None = None,
) -> Any:
    """Resolve ``pkg.mod:Obj`` (or ``pkg.mod.Obj``, or ``file.py:Obj``) to an object.

    Only modules listed as plug-ins (``allowed_modules``) may be named; anything else is
    refused before any import happens.

    Raises:
        UnknownComponentError: the module is not a listed plug-in, or has no such object.
        PluginError: the listed module failed to import.
    """
    module_name, attr = _split_import_path(name)
    allowed = list(allowed_modules)
    entry = _listed(module_name, allowed)
    if entry is None or not attr:
        listed = ", ".join(allowed) if allowed else "none"
        raise UnknownComponentError(
            f"no {kind} named '{name}'; an import path is accepted only for modules listed "
            f"in 'plugins:' or --plugins (listed: {listed})",
            path=path,
            source=source,
        )
    module = load_plugin(module_name, base_dir=base_dir, origin="a config 'type:' import path")
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise UnknownComponentError(
            f"plug-in module '{module_name}' has no attribute '{attr}' (from type '{name}')", path=path, source=source
        ) from None
    if not callable(obj):
        raise UnknownComponentError(
            f"'{name}' is not a class or function, so it cannot be built as a {kind}", path=path, source=source
        )
    return obj
