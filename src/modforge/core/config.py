"""YAML configs: safe loading, ``_base_`` inheritance, dotted overrides, and origins.

* Files are read with ``yaml.SafeLoader`` only: a ``!!python/object`` tag is a syntax
  error, never code.
* ``_base_: path`` or a list of paths (relative to the file that names them) is loaded
  first and deep-merged under the file: mappings merge key by key, anything else is
  replaced; a mapping with ``_delete_: true`` replaces its base instead of merging.
  ``plugins:`` lists are the exception: they accumulate, so a base's plug-ins stay
  loaded.  A file that (directly or not) inherits from itself is a
  :class:`~modforge.core.errors.ConfigCycleError` naming the chain.
* ``key.path=value`` overrides set one value, read as YAML (``width=64`` is an int,
  ``dims=[1,2]`` a list); list items are addressed by index (``model.losses.0.weight=2``).
  One that switches a part's (or the dataset's, the algorithm's...) type drops the old
  type's arguments the new one does not take, with a warning (:mod:`.retype`).
* Every leaf remembers where it came from (``configs/x.yaml:12`` or
  ``override 'a.b=1'``) so any later error can say which file to fix.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from .coercion import parse_scalar
from .cwd import display_path
from .errors import (
    ConfigCycleError,
    ConfigFileError,
    ConfigValueError,
    UnknownKeyError,
)
from .origins import CommandLineOrigin, typed_here
from .references import Reference, follow_reference, vouched_sources
from .yaml_guard import read_config_text, safe_yaml_load

__all__ = ["Config", "check_keys", "display_path", "load_config", "parse_override", "require_mapping"]

_MISSING = object()
BASE_KEY = "_base_"
DELETE_KEY = "_delete_"
PLUGINS_KEY = "plugins"


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


class Config:
    """A resolved configuration: plain nested dicts/lists plus where each value came from.

    Attributes:
        data: the configuration itself (plain ``dict``/``list``/scalars).
        origins: dotted key path → source label, for leaves and the keys that hold them.
        file: the main config file, if loaded from one.
    """

    def __init__(
        self, data: dict[str, Any] | None = None, origins: dict[str, str] | None = None, file: Path | None = None
    ):
        self.data: dict[str, Any] = data if data is not None else {}
        self.origins: dict[str, str] = origins if origins is not None else {}
        self.file = file
        self.plugin_sources: dict[str, Path] = {}
        """Plug-in entry → the folder of the config file that listed it (where it may be
        imported from). Filled only by loading config files the user gave: a stored config
        (a checkpoint's, an artifact's) vouches for no plug-in. Never serialized."""
        self.stored = False
        """A config modforge saved (a checkpoint's, a run's ``config.yaml`` being resumed): data
        describing a finished or running run, whose starting weights its checkpoints hold."""

    # ------------------------------------------------------------------ access
    @property
    def base_dir(self) -> Path:
        """Directory relative paths in the config are resolved against."""
        return self.file.parent if self.file else Path.cwd()

    @property
    def name(self) -> str:
        """The config's name (its file's stem unless set), used for run folders and summaries."""
        if getattr(self, "_name", None):
            return self._name
        return self.file.stem if self.file else "config"

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    @property
    def plugins(self) -> list[str]:
        value = self.data.get(PLUGINS_KEY) or []
        return [value] if isinstance(value, str) else list(value)

    def where(self, path: str) -> str | None:
        """The source of ``path`` or of its closest recorded ancestor.

        A list one of whose items was typed on the command line (``...channels.0=abc``) is that
        command line's: a list is checked as one value, and the item is what changed it."""
        typed = self._typed_item(path)
        if typed is not None:
            return typed
        probe = path
        while probe:
            if probe in self.origins:
                return self.origins[probe]
            probe = probe.rpartition(".")[0]
        if self.file is not None:
            return display_path(self.file)
        return None

    def _typed_item(self, path: str) -> str | None:
        """The command-line origin of an item (at any list depth) inside the list at ``path``, if any."""
        prefix = f"{path}."
        for key, origin in self.origins.items():
            if key.startswith(prefix) and typed_here(origin):
                if all(part.lstrip("-").isdigit() for part in key[len(prefix) :].split(".")):
                    return origin
        return None

    def get(self, path: str, default: Any = _MISSING) -> Any:
        """The value at dotted ``path`` (``default`` or KeyError when absent)."""
        node: Any = self.data
        for part in path.split(".") if path else []:
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
                node = node[int(part)]
            else:
                if default is _MISSING:
                    raise KeyError(path)
                return default
        return node

    def __contains__(self, path: str) -> bool:
        return self.get(path, _MISSING) is not _MISSING

    def set(self, path: str, value: Any, origin: str) -> None:
        """Set dotted ``path`` to ``value``, creating mappings on the way.

        Raises:
            ConfigValueError: the path runs through a value that is not a mapping or list.
        """
        parts = path.split(".")
        if not path or any(p == "" for p in parts):
            raise ConfigValueError(f"malformed key path '{path}'", source=origin)
        node: Any = self.data
        walked = ""
        for part in parts[:-1]:
            walked = _join(walked, part)
            node = self._child(node, part, walked, origin, create=True)
        last = parts[-1]
        if isinstance(node, list):
            node[self._index(node, last, path, origin)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigValueError(f"cannot set a key inside {type(node).__name__} value", path=path, source=origin)
        for key in [k for k in self.origins if _under(k, path)]:
            del self.origins[key]
        self.origins[path] = origin

    def _child(self, node: Any, part: str, walked: str, origin: str, create: bool) -> Any:
        if isinstance(node, dict):
            if part not in node or node[part] is None:
                if not create:
                    raise KeyError(walked)
                node[part] = {}
                # the mapping is this origin's doing: a mistyped key on the way (``train.optimizr.args.lr=1``)
                # is then blamed on the override that made it, not on the file its parent came from
                self.origins[walked] = origin
            return node[part]
        if isinstance(node, list):
            return node[self._index(node, part, walked, origin)]
        raise ConfigValueError(
            f"cannot descend into a {type(node).__name__} value ({node!r})",
            path=walked.rpartition(".")[0] or walked,
            source=origin,
        )

    @staticmethod
    def _index(node: list, part: str, path: str, origin: str) -> int:
        if not part.lstrip("-").isdigit() or not -len(node) <= int(part) < len(node):
            raise ConfigValueError(f"'{part}' is not an index of this {len(node)}-item list", path=path, source=origin)
        return int(part)

    # --------------------------------------------------------------- overrides
    def apply_overrides(self, overrides: Iterable[str]) -> Config:
        """Apply ``key.path=value`` strings in order (see :func:`parse_override`).

        An override that changes a spec's type (``model.backbone=X``, ``data.type=X``,
        ``continual.algorithm=X``...) drops the config's arguments the new type does not
        take, with one warning (see :mod:`modforge.core.retype`): every command that takes
        overrides behaves the same."""
        from .retype import type_override

        for text in overrides:
            key, value = parse_override(text)
            origin = CommandLineOrigin(f"override '{text}'")
            if not type_override(self, key, value, origin, shown=text):
                self.set(key, value, origin)
        return self

    # ------------------------------------------------------------------ output
    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.data)

    def to_yaml(self) -> str:
        """The configuration as YAML, keys in their config order."""
        return yaml.safe_dump(self.data, sort_keys=False, default_flow_style=False, allow_unicode=True)

    def copy(self) -> Config:
        duplicate = Config(copy.deepcopy(self.data), dict(self.origins), self.file)
        duplicate.plugin_sources = dict(self.plugin_sources)
        duplicate.stored = self.stored
        return duplicate

    def __repr__(self) -> str:
        return f"Config(file={self.file!s}, keys={list(self.data)})"


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b.c=64"`` → ``("a.b.c", 64)``; the value is read as YAML.

    Raises:
        ConfigValueError: no ``=``, or an empty/malformed key path.
    """
    if not isinstance(text, str) or "=" not in text:
        raise ConfigValueError(f"override {text!r} must look like key.path=value", source="command line")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or any(part == "" or part.strip() != part for part in key.split(".")):
        raise ConfigValueError(f"override {text!r} has a malformed key path '{key}'", source="command line")
    return key, parse_scalar(raw)


# ---------------------------------------------------------------------- loading
def _read_text(path: Path, shown: str) -> str:
    """The file's text; only a regular, reasonably small UTF-8 file is read (see yaml_guard)."""
    return read_config_text(path, shown)


def _parse_yaml(text: str, shown: str) -> tuple[Any, dict[str, str]]:
    """Safe-load ``text``; also return ``path -> 'file:line'`` for every key.

    ``safe_yaml_load`` refuses too-deep, alias-bombed, self-aliasing and duplicate-key
    documents first, so the recursive walk below stays bounded.
    """
    node, data = safe_yaml_load(text, shown)
    origins: dict[str, str] = {}
    _record_lines(node, "", shown, origins)
    return data, origins


def _record_lines(node: Any, prefix: str, shown: str, origins: dict[str, str]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                continue
            path = _join(prefix, key_node.value)
            origins[path] = f"{shown}:{key_node.start_mark.line + 1}"
            _record_lines(value_node, path, shown, origins)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            path = _join(prefix, i)
            origins[path] = f"{shown}:{item.start_mark.line + 1}"
            _record_lines(item, path, shown, origins)


def _merge(base: Any, child: Any, origins: dict[str, str], prefix: str = "") -> Any:
    """Deep-merge ``child`` over ``base``.

    ``origins`` (the base's) loses every entry under a path the child replaces; the
    caller then adds the child's own origins, which win where both name a key.
    """
    if isinstance(base, dict) and isinstance(child, dict) and not child.get(DELETE_KEY, False):
        merged = dict(base)
        for key, value in child.items():
            if key == DELETE_KEY:
                continue
            path = _join(prefix, key)
            if key == PLUGINS_KEY and not prefix:
                merged[key] = _union_lists(merged.get(key), value)
            elif key in merged:
                merged[key] = _merge(merged[key], value, origins, path)
            else:
                merged[key] = _strip_delete(value)
        return merged
    for path in [p for p in origins if _under(p, prefix)]:
        del origins[path]
    return _strip_delete(child)


def _strip_delete(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_delete(v) for k, v in value.items() if k != DELETE_KEY}
    if isinstance(value, list):
        return [_strip_delete(v) for v in value]
    return value


def _union_lists(base: Any, child: Any) -> list[Any]:
    out: list[Any] = []
    for value in (base, child):
        items = [] if value is None else [value] if isinstance(value, str) else list(value)
        out.extend(i for i in items if i not in out)
    return out


def _absolute_plugin_paths(data: dict[str, Any], directory: Path, shown: str, sources: dict[str, Path]) -> None:
    """Rewrite relative ``.py`` plug-in paths against the file that lists them, and record in
    ``sources`` the entries that file may vouch for (those beside it: see :mod:`.plugins`)."""
    plugins = data.get(PLUGINS_KEY)
    if plugins is None:
        return
    if isinstance(plugins, str):
        plugins = [plugins]
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise ConfigValueError(
            f"expected a list of module names or .py paths, got {plugins!r}", path=PLUGINS_KEY, source=shown
        )
    data[PLUGINS_KEY] = [
        str((directory / p).resolve()) if p.endswith(".py") and not os.path.isabs(p) else p for p in plugins
    ]
    for entry in data[PLUGINS_KEY]:
        sources.setdefault(entry, directory)


def _real_folder_of(path: Path) -> Path:
    """The folder a config file really lies in (links resolved; as written when a link loops — the
    loop is reported when the file is read)."""
    try:
        return path.expanduser().resolve().parent
    except (OSError, RuntimeError, ValueError):
        return Path(os.path.abspath(path.expanduser())).parent


def _absolute_type_paths(node: Any, directory: Path, depth: int = 0) -> None:
    """Rewrite ``type: parts.py:Net`` (a relative file import path) against the file that
    names it, so the config means the same file wherever it is read from later."""
    if depth > 100:
        return
    if isinstance(node, dict):
        value = node.get("type")
        if isinstance(value, str) and ".py:" in value and not os.path.isabs(value):
            file, _, attr = value.rpartition(":")
            node["type"] = f"{(directory / file).resolve()}:{attr}"
        for child in node.values():
            _absolute_type_paths(child, directory, depth + 1)
    elif isinstance(node, list):
        for child in node:
            _absolute_type_paths(child, directory, depth + 1)


MAX_CONFIG_FILES = 64
"""Distinct files one config may inherit from (a diamond of ``_base_`` files is read once per file)."""


@dataclasses.dataclass
class _Loading:
    """What one :func:`load_config` call collects across its ``_base_`` files."""

    sources: dict[str, Path] = dataclasses.field(default_factory=dict)
    files: dict[Path, tuple[dict[str, Any], dict[str, str]]] = dataclasses.field(default_factory=dict)
    stored: bool = False  # a config modforge saved: complete, so a _base_ in it is refused
    vouch_root: Path | None = None  # the folder whose plug-ins the files read may import (None: none)


def _load_file(path: Path, stack: tuple[Path, ...], loading: _Loading) -> tuple[dict[str, Any], dict[str, str]]:
    try:
        path = path.expanduser().resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop (RuntimeError before Python 3.13), a NUL byte
        path = Path(os.path.abspath(path.expanduser()))
    shown = display_path(path)
    if path in stack:
        chain = " -> ".join(display_path(p) for p in (*stack, path))
        raise ConfigCycleError(
            f"_base_ inheritance loops back onto itself: {chain}", path=BASE_KEY, source=display_path(stack[-1])
        )
    if path in loading.files:  # inherited twice (a diamond): read once
        data, origins = loading.files[path]
        return copy.deepcopy(data), dict(origins)
    if len(loading.files) >= MAX_CONFIG_FILES:
        raise ConfigFileError(f"more than {MAX_CONFIG_FILES} files in one _base_ inheritance; a config may "
                              f"inherit from at most {MAX_CONFIG_FILES}", path=BASE_KEY, source=shown)  # fmt: skip
    data, origins = _load_one_file(path, shown, stack, loading)
    loading.files[path] = (copy.deepcopy(data), dict(origins))
    return data, origins


def _load_one_file(
    path: Path, shown: str, stack: tuple[Path, ...], loading: _Loading
) -> tuple[dict[str, Any], dict[str, str]]:
    data, origins = _parse_yaml(_read_text(path, shown), shown)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"the top level of a config must be a mapping of sections, got {type(data).__name__}", source=shown
        )
    bases = data.pop(BASE_KEY, None)
    if bases is not None and loading.stored:
        raise ConfigValueError("a stored config is complete and inherits from nothing; a _base_ in it would read "
                               "a file it names, which a config from elsewhere may not choose", path=BASE_KEY,
                               source=shown)  # fmt: skip
    origins = {k: v for k, v in origins.items() if not _under(k, BASE_KEY)}
    _absolute_plugin_paths(data, path.parent, shown, loading.sources)
    _absolute_type_paths(data, path.parent)
    if bases is None:
        return data, origins
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not bases or not all(isinstance(b, str) and b.strip() for b in bases):
        raise ConfigValueError(
            f"expected a file path or a list of file paths, got {bases!r}", path=BASE_KEY, source=shown
        )
    merged: dict[str, Any] = {}
    merged_origins: dict[str, str] = {}
    for base in bases:
        base_path = follow_reference(BASE_KEY, base, origin=shown, said_in=path.parent, stored=loading.stored,
                                     vouch_root=loading.vouch_root).path  # fmt: skip
        try:
            base_data, base_origins = _load_file(base_path, (*stack, path), loading)
        except ConfigFileError as exc:
            if exc.source == display_path(base_path.resolve()) and "not found" in exc.message:
                raise ConfigFileError(
                    f"_base_ file '{base}' not found (looked for {display_path(base_path)})",
                    path=BASE_KEY,
                    source=shown,
                ) from None
            raise
        merged = _merge(merged, base_data, merged_origins)
        merged_origins.update(base_origins)
    merged = _merge(merged, data, merged_origins)
    merged_origins.update(origins)
    return merged, merged_origins


def load_config(
    source: str | os.PathLike | Mapping[str, Any],
    overrides: Iterable[str] = (),
    *,
    stored: bool = False,
    reference: Reference | None = None,
) -> Config:
    """Load a config file (or wrap a mapping), resolve ``_base_``, apply overrides.

    Args:
        source: a YAML file, or the config as a mapping.
        overrides: ``key.path=value`` strings applied after loading.
        stored: the file is a config modforge saved (a run folder's ``config.yaml``): like a
            mapping, it vouches for no plug-in beside it (see :attr:`Config.plugin_sources`).
        reference: the file is one another config points at (a teacher's config): it vouches
            only for the plug-ins ``reference`` allows (:mod:`.references`) — none when the
            reference came from a stored config.

    Raises:
        ConfigError: missing/unreadable file, invalid YAML, inheritance cycle, bad
            override — always with the file (and line or key path) named.
    """
    if isinstance(source, Mapping):
        data = copy.deepcopy(dict(source))
        if BASE_KEY in data:
            raise ConfigValueError("_base_ is only supported in config files", path=BASE_KEY, source="a Python mapping")
        cfg = Config(data, {}, None)
    else:
        path = Path(source)
        if stored:
            vouch_root = None
        else:  # only the tree of the file the user gave vouches: not a _base_ elsewhere
            vouch_root = reference.vouch_root if reference is not None else _real_folder_of(path)
        loading = _Loading(stored=stored, vouch_root=vouch_root)
        data, origins = _load_file(path, (), loading)
        cfg = Config(data, origins, path.expanduser().resolve())
        cfg.stored = stored
        cfg.plugin_sources = vouched_sources(loading.sources, vouch_root)
    return cfg.apply_overrides(overrides)


def check_keys(
    mapping: Mapping[str, Any],
    allowed: Iterable[str],
    *,
    path: str = "",
    what: str = "key",
    origin_of: Callable[[str], str | None] | None = None,
) -> None:
    """Refuse keys of ``mapping`` outside ``allowed``, suggesting the closest valid one.

    Raises:
        UnknownKeyError
    """
    where = origin_of or (lambda _p: None)
    allowed = list(allowed)
    for key in mapping:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            key_path = _join(path, key)
            raise UnknownKeyError(
                f"unknown {what} '{key}'{hint} (valid: {', '.join(allowed)})", path=key_path, source=where(key_path)
            )


def require_mapping(value: Any, *, path: str, origin_of: Callable[[str], str | None] | None = None) -> dict[str, Any]:
    """``value`` if it is a mapping (``None`` counts as empty), else a located error."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        where = origin_of or (lambda _p: None)
        raise ConfigValueError(f"expected a mapping, got {value!r}", path=path, source=where(path))
    return dict(value)
