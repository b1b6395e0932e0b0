"""A config's ``plugins:`` and a stored config's: imported only when someone entitled vouches for them.

A config vouches for the ``.py`` files and packages beside it (its folder or below); installed
packages vouch for their ``modforge.plugins`` entry points; the user vouches for what ``--plugins``
names (plain folders included). A stored config (a checkpoint's, an artifact's) vouches for
nothing: :func:`require_plugins` only checks that what it needs is already loaded.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

from .errors import PluginError
from .plugin_entry_points import _entry_point_covering
from .plugin_importing import _import_module, _import_path, _submodule
from .plugin_records import (
    _TRUSTED_FOLDERS,
    ENTRY_POINT_GROUP,
    USER_ORIGIN,
    LoadedPlugin,
    _inside,
    _looks_like_file,
    _remember,
    _standard_library,
    loaded_plugin,
    loaded_plugins,
)

__all__ = ["load_config_plugins", "plugin_entries", "require_plugins"]

log = logging.getLogger("modforge.plugins")
_MAX_ENTRY = 1024


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
