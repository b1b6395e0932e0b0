"""``type: pkg.mod:Obj``: an import path resolved to a class or function *defined in* a loaded plug-in
(:func:`import_object`) — never importing a module that is not a plug-in, never reaching an object a
plug-in merely imported from elsewhere."""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import UnknownComponentError
from .plugin_importing import _submodule
from .plugin_records import _looks_like_file, _normal, loaded_plugin

__all__ = ["import_object", "is_import_path"]


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
