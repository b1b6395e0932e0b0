"""Importing a plug-in that someone vouched for: a ``.py`` file, a package folder, an installed module,
or a submodule of a vouched-for package folder. Who may vouch is decided by the callers."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from .errors import PluginError
from .plugin_records import LoadedPlugin, _inside, _module_name_for_file, _remember, _standard_library


def _package_name(folder: Path, origin: str, spec: str, name: str | None) -> str:
    """The module name a package folder is imported under: a Python name, never a standard-library module's."""
    name = name or folder.name
    if not name.isidentifier():
        raise PluginError(f"plug-in folder '{spec}' is not a Python package name (from {origin})")
    if _standard_library(name):
        raise PluginError(f"plug-in '{spec}' (from {origin}) is refused: '{name}' is the name of a "
                          "standard-library module, which a plug-in may not replace")  # fmt: skip
    return name


def _run_module(name: str, location: Path, origin: str, spec: str, package: Path | None = None) -> ModuleType:
    """Import the file ``location`` as module ``name`` (a package when ``package`` is its folder)."""
    module_spec = importlib.util.spec_from_file_location(
        name, location, submodule_search_locations=[str(package)] if package is not None else None
    )
    if module_spec is None or module_spec.loader is None:
        raise PluginError(f"plug-in '{spec}' cannot be imported as Python (from {origin})")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except PluginError:
        sys.modules.pop(name, None)
        raise
    except BaseException as exc:  # noqa: BLE001 - reported, with the cause chained
        sys.modules.pop(name, None)
        raise PluginError(f"plug-in '{spec}' (from {origin}) failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def _import_file(path: Path, origin: str, spec: str) -> ModuleType:
    """A ``.py`` file, under a stable private name (loading it twice returns the same module)."""
    name = _module_name_for_file(path)
    if name in sys.modules:
        return sys.modules[name]
    return _run_module(name, path, origin, spec)


def _import_package_folder(folder: Path, origin: str, spec: str, name: str | None = None) -> ModuleType:
    """A package folder, under its own name (so its absolute imports and import paths work)."""
    name = _package_name(folder, origin, spec, name)
    init = folder / "__init__.py"
    existing = sys.modules.get(name)
    if existing is not None:
        if Path(getattr(existing, "__file__", "") or "").resolve() == init.resolve():
            return existing
        raise PluginError(
            f"plug-in '{spec}' (from {origin}) is refused: a different module named '{name}' is already "
            f"loaded (from {getattr(existing, '__file__', None) or 'elsewhere'})"
        )
    return _run_module(name, init, origin, spec, package=folder)


def _import_module(name: str, origin: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except PluginError:
        raise
    except BaseException as exc:  # noqa: BLE001
        raise PluginError(f"plug-in '{name}' (from {origin}) failed to import: {type(exc).__name__}: {exc}") from exc


def _import_path(path: Path, spec: str, origin: str, alias: str | None = None) -> LoadedPlugin:
    """Import a plug-in file or package folder that has been vouched for."""
    if not path.exists():
        raise PluginError(f"plug-in file '{spec}' not found (looked for {path}; from {origin})")
    if path.is_dir():  # a package: also known by its module name (its submodules follow from it)
        module = _import_package_folder(path, origin, spec, name=alias)
        return _remember(LoadedPlugin(str(path), module, origin, path), module.__name__)
    module = _import_file(path, origin, spec)
    return _remember(LoadedPlugin(str(path), module, origin, path))


def _submodule(record: LoadedPlugin, name: str, origin: str) -> ModuleType | None:
    """Import submodule ``name`` of the plug-in package ``record`` — only when the package was
    imported from a folder someone vouched for, the name has no ``__dunder__`` part
    (``__main__`` runs a program) and the submodule's file lies inside that folder. An
    installed package's submodules must be named themselves (``--plugins pkg.sub``)."""
    if name in sys.modules:
        module = sys.modules[name]
        folder = record.path
        where = Path(getattr(module, "__file__", "") or "/").resolve()
        return module if folder is not None and folder.is_dir() and _inside(where, folder.resolve()) else None
    folder = record.path
    if folder is None or not folder.is_dir() or not hasattr(record.module, "__path__"):
        return None
    if any(part.startswith("__") or not part.isidentifier() for part in name.split(".")):
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin_file = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    if origin_file is None or not _inside(origin_file, folder.resolve()):
        return None
    return _import_module(name, origin)
