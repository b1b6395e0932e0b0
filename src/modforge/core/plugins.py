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
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import logging
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import PluginError, UnknownComponentError

__all__ = [
    "ENTRY_POINT_GROUP",
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

ENTRY_POINT_GROUP = "modforge.plugins"
USER_ORIGIN = "--plugins"
"""The origin of what the user names on the command line (``load_plugin``'s default)."""
PLUGIN_MODULE_PREFIX = "modforge_plugin_"
"""Module names given to ``.py`` plug-in files (they are not importable by name)."""
log = logging.getLogger("modforge.plugins")
_entry_points_loaded = False
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


_MAX_ENTRY = 1024
_LOADED: dict[str, LoadedPlugin] = {}
_TRUSTED_FOLDERS: list[Path] = []


def load_verified_copy(entry: str, copy: Path, origin: str, source: bytes | Mapping[str, bytes]) -> LoadedPlugin:
    """Import ``copy`` — a run folder's own copy of plug-in ``entry``, whose content the
    caller has checked against the digest recorded at training time — as that plug-in.

    The code that runs is ``source``, the very bytes that were checked: a single file's
    bytes, or a package copy's files (relative POSIX name → bytes). Nothing is read from the
    copy's folder again, no bytecode cache is read or written (a ``.pyc`` planted in the copy
    never runs), and a package's submodules are served only from those bytes (a name that is
    not among its verified ``.py`` files is no module).

    Raises:
        PluginError: a package copy without ``__init__.py``, a name clash with a module
            already loaded from elsewhere, or the code raised on import.
    """
    name = None if _looks_like_file(entry) else entry.split(".", 1)[0]
    if isinstance(source, Mapping):
        module = _import_verified_package(copy, source, origin, entry, name=name)
        record = LoadedPlugin(_normal(entry), module, origin, copy)
        if name is not None and name != entry:
            module = _submodule(record, entry, origin) or module
    else:
        module = _run_source(_module_name_for_file(copy), copy, source, origin, entry)
    return _remember(LoadedPlugin(_normal(entry), module, origin, copy))


class _VerifiedPackage(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The modules of one verified package copy, executed from the bytes that were checked.

    It sits first on ``sys.meta_path`` and answers for the package's name and every name
    below it — but only while the package module Python holds under that name is the one
    it made (the user may later load other code of that name). A ``.py`` file of the copy
    is a module, a folder holding ``.py`` files a package; any other name below the package
    is no module: the file finders never look in the copy's folder, so a cache or a file
    that was not verified cannot be picked up there.
    """

    def __init__(self, name: str, folder: Path, files: Mapping[str, bytes]):
        self.name, self.folder, self.files = name, folder, dict(files)
        self.modules: dict[str, tuple[str | None, str]] = {}  # module → (its file, or None; its folder)
        for rel in sorted(self.files):
            parts = rel.split("/")
            if not rel.endswith(".py") or not all(p.isidentifier() for p in parts[:-1]):
                continue
            stem = parts[-1][:-3]
            if stem == "__init__":
                self.modules[".".join([name, *parts[:-1]])] = (rel, "/".join(parts[:-1]))
            elif stem.isidentifier():
                self.modules[".".join([name, *parts[:-1], stem])] = (rel, "")
            for depth in range(1, len(parts)):  # a folder of .py files without __init__.py: an empty package
                self.modules.setdefault(".".join([name, *parts[:depth]]), (None, "/".join(parts[:depth])))

    def _serves(self, fullname: str) -> bool:
        top = sys.modules.get(self.name)
        return (fullname == self.name or fullname.startswith(self.name + ".")) and getattr(
            top, "__loader__", None
        ) is self

    def spec(self, fullname: str) -> importlib.machinery.ModuleSpec:
        rel, package = self.modules[fullname]
        is_package = rel is None or rel.endswith("__init__.py")
        where = self.folder / (rel if rel is not None else package)
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=str(where), is_package=is_package)
        if is_package:
            spec.submodule_search_locations = [str(self.folder / package) if package else str(self.folder)]
        spec.has_location = rel is not None
        return spec

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001, ANN201 - the importlib protocol
        if not self._serves(fullname):
            return None
        if fullname not in self.modules:
            raise ModuleNotFoundError(f"No module named {fullname!r} among the verified files of {self.folder}",
                                      name=fullname)  # fmt: skip
        return self.spec(fullname)

    def create_module(self, spec):  # noqa: ANN001, ANN201
        return None

    def exec_module(self, module: ModuleType) -> None:
        rel, _ = self.modules[module.__name__]
        if rel is None:
            return
        code = compile(self.files[rel], str(self.folder / rel), "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the verified bytes

    def get_source(self, fullname: str) -> str | None:
        rel = self.modules.get(fullname, (None, ""))[0]
        return self.files[rel].decode("utf-8", "replace") if rel is not None else None

    def is_package(self, fullname: str) -> bool:
        return self.spec(fullname).submodule_search_locations is not None


def _package_name(folder: Path, origin: str, spec: str, name: str | None) -> str:
    """The module name a package folder is imported under: a Python name, never a standard-library module's."""
    name = name or folder.name
    if not name.isidentifier():
        raise PluginError(f"plug-in folder '{spec}' is not a Python package name (from {origin})")
    if _standard_library(name):
        raise PluginError(f"plug-in '{spec}' (from {origin}) is refused: '{name}' is the name of a "
                          "standard-library module, which a plug-in may not replace")  # fmt: skip
    return name


def _import_verified_package(
    folder: Path, files: Mapping[str, bytes], origin: str, spec: str, name: str | None = None
) -> ModuleType:
    """A verified package copy, under its own name, run from ``files`` (see :class:`_VerifiedPackage`)."""
    name = _package_name(folder, origin, spec, name)
    if "__init__.py" not in files:
        raise PluginError(f"plug-in '{spec}' (from {origin}) is refused: the package copy has no __init__.py")
    existing = sys.modules.get(name)
    if existing is not None:
        loader = getattr(existing, "__loader__", None)
        if isinstance(loader, _VerifiedPackage) and loader.folder == folder and loader.files == dict(files):
            return existing
        raise PluginError(
            f"plug-in '{spec}' (from {origin}) is refused: a different module named '{name}' is already "
            f"loaded (from {getattr(existing, '__file__', None) or 'elsewhere'})"
        )
    finder = _VerifiedPackage(name, folder, files)
    with _lock:
        sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, _VerifiedPackage) and f.name == name)]
        sys.meta_path.insert(0, finder)
    module = importlib.util.module_from_spec(finder.spec(name))
    sys.modules[name] = module
    try:
        finder.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - reported, with the cause chained
        sys.modules.pop(name, None)
        raise PluginError(f"plug-in '{spec}' (from {origin}) failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def _run_source(name: str, path: Path, source: bytes, origin: str, spec: str) -> ModuleType:
    """Execute ``source`` as module ``name`` (its file named ``path`` in tracebacks)."""
    if name in sys.modules:
        return sys.modules[name]
    module = ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - verified bytes
    except BaseException as exc:  # noqa: BLE001
        sys.modules.pop(name, None)
        raise PluginError(f"plug-in '{spec}' (from {origin}) failed to import: {type(exc).__name__}: {exc}") from exc
    return module


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


# --------------------------------------------------------------- importing
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


# -------------------------------------------------------------- the user's
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


# ------------------------------------------------------------ entry points
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


# ----------------------------------------------------------------- configs
def _beside(entry: str, folder: Path) -> Path | None:
    """The file or package folder that config entry ``entry`` names inside ``folder``."""
    if _looks_like_file(entry):
        path = Path(entry) if os.path.isabs(entry) else folder / entry
        path = path.resolve()
        return path if _inside(path, folder.resolve()) else None  # a missing file: reported when imported
    top = entry.split(".", 1)[0]
    if not top.isidentifier() or _installed_elsewhere(top, folder):
        return None
    for candidate in (folder / top, folder / f"{top}.py"):
        if (candidate / "__init__.py").is_file() or (candidate.suffix == ".py" and candidate.is_file()):
            resolved = candidate.resolve()
            return resolved if _inside(resolved, folder.resolve()) else None  # a symlink out is not beside
    return None


def _installed_elsewhere(top: str, folder: Path) -> bool:
    """Whether module ``top`` is already loaded or importable from outside ``folder`` — a
    file beside a config never replaces an installed module (``numpy.py``, ``sklearn/``)."""
    existing = sys.modules.get(top)
    try:
        spec = importlib.util.find_spec(top) if existing is None else existing.__spec__
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None) if spec is not None else None
    if spec is None:
        return existing is not None
    if not origin or origin in ("built-in", "frozen"):
        return True
    return not _inside(Path(origin).resolve(), folder.resolve())


def _vouched(entry: str, sources: Mapping[str, Path]) -> tuple[Path | None, str] | None:
    """Where a config entry may be imported from, and who vouches: the folder of the config
    that lists it, or a folder the user named; ``None`` when nobody does."""
    folders = [(sources[entry], f"beside {sources[entry]}")] if entry in sources else []
    folders += [(folder, f"in the folder {folder} named with --plugins") for folder in list(_TRUSTED_FOLDERS)]
    for folder, why in folders:
        found = _beside(entry, folder)
        if found is not None:
            return found, why
    return None


def _refusal(entry: str) -> str:
    if not _looks_like_file(entry) and _standard_library(entry):
        return f"'{entry}' is a standard-library module, never a plug-in"
    if _looks_like_file(entry):
        return f"'{entry}' does not lie beside the config (in its folder or below)"
    return f"'{entry}' is neither beside the config nor an installed package's '{ENTRY_POINT_GROUP}' entry point"


def _load_vouched(entry: str, sources: Mapping[str, Path], origin: str) -> LoadedPlugin | None:
    """Import ``entry`` if anyone vouches for it; ``None`` otherwise (nothing imported)."""
    record = loaded_plugin(entry)
    if record is not None:
        return record
    if not _looks_like_file(entry) and _standard_library(entry):
        return None
    parent = loaded_plugin(entry.split(".", 1)[0]) if not _looks_like_file(entry) and "." in entry else None
    if parent is not None and parent.path is not None:  # a module inside a plug-in package already vouched for
        module = _submodule(parent, entry, origin)
        return _remember(LoadedPlugin(entry, module, parent.origin, parent.path)) if module is not None else None
    covering = _entry_point_covering(entry) if not _looks_like_file(entry) else None
    if covering is not None:  # an installed plug-in wins over a file of the same name planted beside a config
        return _remember(LoadedPlugin(entry, _import_module(entry, origin), covering))
    vouched = _vouched(entry, sources)
    if vouched is None:
        return None
    path, why = vouched
    origin = f"{origin}, {why}"
    if _looks_like_file(entry):
        return _import_path(path, entry, origin)
    if "." in entry and not path.is_dir():
        return None  # a dotted name cannot point inside a single-file module: refused before importing it
    loaded = _import_path(path, entry, origin)
    module = loaded.module if "." not in entry else _submodule(loaded, entry, origin)
    return _remember(LoadedPlugin(entry, module, origin, path)) if module is not None else None


def load_config_plugins(
    plugins: Iterable[str], *, sources: Mapping[str, Path] | None = None, origin: str = "plugins:"
) -> list[ModuleType]:
    """Import the ``plugins:`` of a config — only what someone entitled vouches for.

    Args:
        plugins: the config's entries.
        sources: entry → the folder of the config file that listed it (from
            :attr:`~modforge.core.config.Config.plugin_sources`); entries found there are
            imported. A config that did not come from a file (a stored one) has none.
        origin: where the list came from, for messages.

    Raises:
        PluginError: one message naming every entry nobody vouched for, and why.
    """
    sources = sources or {}
    modules, refused = [], []
    for entry in plugin_entries(plugins, origin):
        record = _load_vouched(entry, sources, origin)
        if record is None:
            refused.append(entry)
        else:
            modules.append(record.module)
    if refused:
        reasons = "; ".join(_refusal(e) for e in refused)
        raise PluginError(
            f"{origin} names plug-ins modforge will not import: {', '.join(refused)} ({reasons}). "
            f"A config may name .py files and packages beside it and modules of installed packages that declare "
            f"the '{ENTRY_POINT_GROUP}' entry point; anything else must be given with --plugins"
        )
    return modules


def require_plugins(plugins: Iterable[str], *, what: str, example: str = "", note: str = "") -> list[str]:
    """Check that a *stored* config's plug-ins (a checkpoint's, an artifact's) are loaded or
    installed as entry points — importing nothing else, since stored configs are data.

    When the user named plug-ins of their own (``--plugins``, e.g. the same code moved
    elsewhere), the missing entries are only a warning: the parts are looked up by name in
    what the user loaded, and an import path into a missing entry still fails, clearly.

    ``note`` says why a source that might have provided them did not (e.g. why a run's own
    copies were not imported); it is part of the message when something is missing.

    Returns:
        the plug-in entries to build with: the stored ones, the missing ones replaced by
        the user's.

    Raises:
        PluginError: one message listing what is missing and how to provide it.
    """
    entries, missing = plugin_entries(plugins, what), []
    for entry in entries:
        if _load_vouched(entry, {}, what) is None:
            missing.append(entry)
    if not missing:
        return entries
    stdlib = [e for e in missing if not _looks_like_file(e) and _standard_library(e)]
    note = (f" ({', '.join(stdlib)}: standard library, never a plug-in)" if stdlib else "") + (
        f" ({note})" if note else ""
    )
    mine = sorted({r.entry for r in loaded_plugins() if r.origin == USER_ORIGIN})
    if mine:
        log.warning("%s names plug-ins that are not loaded: %s%s; building with the plug-ins you gave instead (%s)",
                    what, ", ".join(missing), note, ", ".join(mine))  # fmt: skip
        return [e for e in entries if e not in missing] + [e for e in mine if e not in entries]
    hint = f" (e.g. {example} --plugins {' '.join(missing)})" if example else ""
    raise PluginError(
        f"{what} needs plug-ins that are not loaded: {', '.join(missing)}{note}. A stored config is data, "
        f"not code, so modforge does not import them by itself: give them with --plugins{hint}, or install "
        f"them as '{ENTRY_POINT_GROUP}' entry points"
    )


def plugin_entries(plugins: Iterable[str] | str | None, origin: str) -> list[str]:
    """The entries of a ``plugins:`` value, each a printable name or path of sane length.

    Raises:
        PluginError: not a list of such strings (``origin`` says where it came from).
    """
    if plugins is None:
        return []
    if isinstance(plugins, str):
        plugins = [plugins]
    if not isinstance(plugins, (list, tuple)):
        raise PluginError(f"plugins must be a list of module names or .py paths, got {plugins!r} (from {origin})")
    entries = []
    for entry in plugins:
        if not isinstance(entry, str) or not entry.strip():
            raise PluginError(f"plug-in names must be non-empty strings, got {entry!r} (from {origin})")
        if not entry.isprintable() or len(entry) > _MAX_ENTRY:
            raise PluginError(f"plug-in names must be printable and at most {_MAX_ENTRY} characters, got "
                              f"{entry[:80]!r} (from {origin})")  # fmt: skip
        entries.append(entry.strip())
    return entries


# ------------------------------------------------------------ import paths
def is_import_path(name: str) -> bool:
    """True when a ``type:`` value is an import path (``pkg.mod:Obj`` or ``pkg.mod.Obj``)."""
    return ":" in name or "." in name


def _split_import_path(name: str) -> tuple[str, str]:
    if ":" in name:
        module, _, attr = name.rpartition(":")
    else:
        module, _, attr = name.rpartition(".")
    return module, attr


def _listed(module: str, allowed: Iterable[str], base_dir: str | os.PathLike | None) -> str | None:
    """The plug-in entry that covers ``module`` (itself, a parent package, or the same file)."""
    target = module
    if _looks_like_file(module):
        path = Path(module).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        target = str(path.resolve())
    for entry in allowed:
        entry = _normal(entry) if _looks_like_file(entry) else entry
        if target == entry or (not _looks_like_file(entry) and target.startswith(entry + ".")):
            return entry
    return None


def _plugin_module(module_name: str, entry: str) -> ModuleType | None:
    """The loaded module ``module_name`` inside plug-in ``entry``: the plug-in itself, or a
    submodule of a plug-in *package folder* whose file lies in that folder (see
    :func:`_submodule`) — never a submodule of an installed package."""
    record = loaded_plugin(entry)
    if record is None:
        return None
    if _looks_like_file(module_name) or module_name == entry:
        return record.module
    return _submodule(record, record.module.__name__ + module_name[len(entry) :], f"a 'type:' inside plug-in '{entry}'")


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


def import_object(
    name: str,
    *,
    kind: str,
    allowed_modules: Iterable[str] = (),
    base_dir: str | os.PathLike | None = None,
    path: str | None = None,
    source: str | None = None,
    base: str | None = None,
) -> Any:
    """Resolve ``pkg.mod:Obj`` (or ``pkg.mod.Obj``, or ``file.py:Obj``) to a class or function.

    The module must be a plug-in listed in ``allowed_modules`` *and already loaded* through
    a route that vouches for it; the object must be a class or a Python function defined
    in that module (not imported into it), and a class must derive from ``base``
    (``module:Class``, e.g. ``torch.nn:Module`` for model parts) when given. Checked before
    anything is called.

    Raises:
        UnknownComponentError: not a listed, loaded plug-in; no such object; or not one
            defined there.
    """
    module_name, attr = _split_import_path(name)
    allowed = list(allowed_modules)
    entry = _listed(module_name, allowed, base_dir) if attr else None
    if entry is None:
        listed = ", ".join(allowed) if allowed else "none"
        raise UnknownComponentError(
            f"no {kind} named '{name}'; an import path is accepted only for modules listed "
            f"in 'plugins:' or --plugins (listed: {listed})",
            path=path,
            source=source,
        )
    module = _plugin_module(module_name, entry)
    if module is None:
        raise UnknownComponentError(
            f"'{name}' names plug-in '{entry}', which is not loaded (nobody vouched for it: give it with --plugins)",
            path=path,
            source=source,
        )
    obj = getattr(module, attr, None)
    if obj is None:
        raise UnknownComponentError(
            f"plug-in module '{module_name}' has no attribute '{attr}' (from type '{name}')", path=path, source=source
        )
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        raise UnknownComponentError(
            f"'{name}' is not a class or function, so it cannot be built as a {kind}", path=path, source=source
        )
    if getattr(obj, "__module__", None) != module.__name__:
        raise UnknownComponentError(
            f"'{name}' is not defined in plug-in module '{module_name}' (it comes from "
            f"'{getattr(obj, '__module__', '?')}'); a type: may only name a plug-in's own classes and functions",
            path=path,
            source=source,
        )
    if base is not None and inspect.isclass(obj):
        base_module, _, base_name = base.partition(":")
        required = getattr(importlib.import_module(base_module), base_name)
        if not issubclass(obj, required):
            raise UnknownComponentError(f"'{name}' is a class but not a {base_name} ({base}), so it is no {kind}",
                                        path=path, source=source)  # fmt: skip
    return obj
