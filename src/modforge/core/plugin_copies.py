"""A run folder's own copy of a plug-in, imported from the very bytes that were checked against the digest
recorded at training time (:func:`load_verified_copy`): no file of the copy is read again, no bytecode
cache is read or written."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from .errors import PluginError
from .plugin_importing import _package_name, _submodule
from .plugin_records import LoadedPlugin, _lock, _looks_like_file, _module_name_for_file, _normal, _remember

__all__ = ["load_verified_copy"]


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
