"""Changing a spec's ``type`` keeps only the old arguments the new type takes.

A config names registered things as ``{type: NAME, args: {...}}``: the model's parts, the
dataset, the continual algorithm, the optimizer... When the command line switches one to
another type — ``--backbone X``, ``model.backbone=X``, ``model.backbone.type=X``,
``data.type=X``, ``continual.algorithm=X`` — the arguments the config gave the *old* type
would otherwise ride along: refused as unknown by the new type (``data.args.root: unknown
argument``) or, worse, silently meaning something else. So every such switch, whichever
command and whichever spelling, goes through :func:`switch_type`:

* arguments from the config file that the new type does not take are dropped;
* arguments given on the command line itself are never dropped (if the new type does not
  take them, validation says so: the user typed them);
* one warning names what was dropped and what was carried over.

Warnings go to the ``modforge.config`` logger, or into the list of an active
:func:`collect_notes` (the command line parses a config several times and reports once).
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .origins import typed_here

if TYPE_CHECKING:
    from .config import Config

__all__ = ["TYPED_PATHS", "TypeSwitchNote", "collect_notes", "kind_at", "switch_type", "type_override"]

log = logging.getLogger("modforge.config")

TYPED_PATHS: tuple[tuple[str, str | None], ...] = (
    ("model.frontend", "frontend"),
    ("model.backbone", "backbone"),
    ("model.neck", "neck"),
    ("model.head", "head"),
    ("model.losses.*", "loss"),
    ("model.stages.*", None),  # the stage's own ``kind:``
    ("data", "dataset"),
    ("continual.algorithm", "algorithm"),
    ("train.optimizer", "optimizer"),
    ("train.scheduler", "scheduler"),
    ("train.engine", "engine"),
    ("train.callbacks.*", "callback"),
    ("train.metrics.*", "metric"),
)
"""Config paths holding a ``{type, args}`` spec, and the registry kind of their types."""

_notes: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("modforge_retype_notes", default=None)


@contextlib.contextmanager
def collect_notes() -> Iterator[list[str]]:
    """Collect the warnings of type switches made inside the block instead of logging them."""
    notes: list[str] = []
    token = _notes.set(notes)
    try:
        yield notes
    finally:
        _notes.reset(token)


def _emit(note: str) -> None:
    notes = _notes.get()
    if notes is None:
        log.warning(note)
    else:
        notes.append(note)


def kind_at(cfg: Config, path: str) -> str | None:
    """The registry kind of the spec at ``path`` (``None``: no typed spec lives there)."""
    for pattern, kind in TYPED_PATHS:
        if fnmatch.fnmatchcase(path, pattern) and path.count(".") == pattern.count("."):
            if kind is None:
                stage_kind = cfg.get(f"{path}.kind", None)
                return stage_kind if isinstance(stage_kind, str) else None
            return kind
    return None


def type_override(cfg: Config, key: str, value: Any, origin: str, shown: str) -> bool:
    """Apply ``key=value`` when it switches a spec's type (``P.type=X``, or ``P=X`` over a
    ``{type, args}`` mapping); ``False`` (nothing done) for any other override."""
    if key.endswith(".type"):
        path = key[: -len(".type")]
    elif isinstance(value, str):
        path = key
    else:
        return False
    current = cfg.get(path, None)
    if not isinstance(current, dict) or "type" not in current or kind_at(cfg, path) is None:
        return False
    if not isinstance(value, str) or not value.strip():
        return False  # not a type name: validation reports it where it stands
    switch_type(cfg, path, value.strip(), origin, shown)
    return True


def _signature(cfg: Config, kind: str, name: str, path: str, origin: str) -> Any:
    """The new type's signature, or ``None`` when it cannot be known yet (an unknown name, a
    plug-in not loaded yet: validation will report it with its own message)."""
    from .registries import REGISTRIES

    registry = REGISTRIES.get(kind)
    if registry is None:
        return None
    try:
        _obj, sig = registry.resolve(
            name, allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir), path=f"{path}.type", source=origin
        )
    except Exception:  # noqa: BLE001 - any failure here is reported by validation, located
        return None
    return sig


def switch_type(cfg: Config, path: str, name: str, origin: str, shown: str) -> None:
    """Make the spec at ``path`` of type ``name``; drop the old arguments from the config
    that ``name`` does not take, and say (once) what was dropped and what was kept.

    Args:
        cfg: the config, changed in place.
        path: where the spec is (``model.backbone``, ``data``...).
        name: the new type.
        origin: recorded as the new type's source (``override 'data.type=x'``).
        shown: how the warning names the switch (``--backbone mlp``, ``data.type=x``).
    """
    current = cfg.get(path, None)
    if not isinstance(current, dict):
        cfg.set(path, {"type": name, "args": {}}, origin)
        return
    old = current.get("type")
    cfg.set(f"{path}.type", name, origin)
    args = current.get("args")
    if old == name or not isinstance(args, dict) or not args:
        return
    kind = kind_at(cfg, path)
    sig = _signature(cfg, kind, name, path, origin) if kind else None
    if sig is None:
        return
    inherited = [k for k in args if not typed_here(cfg.where(f"{path}.args.{k}"))]
    dropped = [k for k in inherited if not sig.accepts(k)]
    kept = [k for k in inherited if sig.accepts(k)]
    for key in dropped:
        del args[key]
        for recorded in [p for p in cfg.origins if p == f"{path}.args.{key}" or p.startswith(f"{path}.args.{key}.")]:
            del cfg.origins[recorded]
    if not dropped and not kept:
        return
    _emit(TypeSwitchNote(shown, path, old, name, dropped, kept, args))


def _say_switch(shown: str, path: str, old: Any, name: str, dropped: list[str], kept: list[str], args: dict) -> str:
    parts = []
    if dropped:
        parts.append(f"dropped {', '.join(dropped)} ('{name}' does not take them)")
    if kept:
        parts.append(f"kept {', '.join(f'{k}={args[k]!r}' for k in kept)} (set them to change them)")
    return f"{shown}: {path} '{old}' → '{name}': {'; '.join(parts)}"


class TypeSwitchNote(str):
    """A type switch's warning as it read when the switch was made; :meth:`now` reads it again
    against the config as the whole command line left it — an argument kept from the file that
    a later override or flag of the same command line replaced (``data.type=x data.args.root=NEW``)
    was not kept, and the warning must not say ``kept root=OLD``."""

    def __new__(cls, shown: str, path: str, old: Any, name: str, dropped: list[str], kept: list[str], args: dict):
        note = super().__new__(cls, _say_switch(shown, path, old, name, dropped, kept, args))
        note.shown, note.path, note.old, note.name, note.dropped, note.kept = shown, path, old, name, dropped, kept
        return note

    def now(self, cfg: Config) -> str | None:
        """The warning for ``cfg`` as it finally is (``None``: nothing left to say)."""
        if cfg.get(f"{self.path}.type", None) != self.name:
            return None  # switched again later: that switch says what it did
        args = cfg.get(f"{self.path}.args", None)
        args = args if isinstance(args, dict) else {}
        kept = [k for k in self.kept if k in args and not typed_here(cfg.where(f"{self.path}.args.{k}"))]
        if not self.dropped and not kept:
            return None
        return _say_switch(self.shown, self.path, self.old, self.name, self.dropped, kept, args)
