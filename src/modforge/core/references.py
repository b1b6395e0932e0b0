"""References a config makes, and the one rule for following them (DESIGN.md, Trust: "References are data too").

A config points at other files: ``_base_`` (a config merged under it), ``model.init.path`` (weights),
``train.distill.teacher`` (a run folder, checkpoint or config file to learn from), a sweep's ``config:``.
What is pointed at is read with the *origin of the reference*:

* **typed** on this command line (an override ``train.distill.teacher=t.yaml``, a flag): the user chose
  the file. A relative path is relative to the current folder; plug-ins beside *that* file may be imported.
* written in a **config file the user passed** (or one it inherits from): a relative path is relative to
  the file that says it; the file vouches only for plug-ins beside the config the user passed — a file
  it points at in another folder vouches for nothing there.
* written in a **stored** config (a checkpoint's, a run's ``config.yaml`` being resumed, a sweep
  folder's ``sweep.yaml``): data describing a run, which may come from someone else. Following it never
  imports a plug-in, never downloads, never opens a connection; whatever it needs must already be loaded
  (``--plugins``, installed entry points).

:func:`follow_reference` is the only place that decides this; every reference kind is listed in
:data:`REFERENCE_KINDS` (a kind that is not listed cannot be followed — the test over every kind then
covers a new one). Fingerprints (a teacher's SHA-256) are compared by the caller *before* anything the
reference names is built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .downloads import no_downloads
from .origins import typed_here

__all__ = ["REFERENCE_KINDS", "Reference", "Trust", "follow_reference", "may_carry_code", "references_in",
           "stored_data_downloads", "vouched_sources"]

REFERENCE_KINDS: dict[str, str] = {
    "_base_": "a config file merged under the one that names it",
    "model.init.path": "a weights file or folder loaded into the model",
    "train.distill.teacher": "the run folder, checkpoint or config file a student learns from",
    "sweep.config": "the config file a sweep's trials train",
}
"""Every key whose value names a file or folder modforge reads: the kinds :func:`follow_reference` knows."""


class Trust(enum.Enum):
    """Who chose the file a reference names."""

    TYPED = "typed on the command line"
    FILE = "written in a config file you passed"
    STORED = "written in a stored config"


@dataclasses.dataclass(frozen=True)
class Reference:
    """A reference followed: where it points and what reading it may do.

    Attributes:
        kind: the key of :data:`REFERENCE_KINDS`.
        path: the absolute path it names (links not resolved: callers check folders).
        trust: who chose it.
        vouch_root: the folder whose plug-ins (its own, or below) the file read may import;
            ``None`` when it may import none (a stored reference).
        said: where the reference was said (a file and line, ``override '...'``), for messages.
    """

    kind: str
    path: Path
    trust: Trust
    vouch_root: Path | None
    said: str = ""

    @property
    def stored(self) -> bool:
        """Whether the reference comes from a stored config (data: no plug-ins, downloads, connections)."""
        return self.trust is Trust.STORED

    def vouched(self, sources: Mapping[str, Path]) -> dict[str, Path]:
        """The plug-in entries of the file read (entry → the folder of the config file that listed
        them) that this reference allows to be imported: those listed by a file inside the vouching
        folder. A stored reference allows none."""
        return vouched_sources(sources, self.vouch_root)

    @contextlib.contextmanager
    def followed(self) -> Iterator[None]:
        """While the file read is built: downloads (and the connections they open) are off for a stored
        reference. Trackers and storages are never started for what a reference names."""
        if not self.stored:
            yield
            return
        with no_downloads(f"{self.kind} is {Trust.STORED.value}, and a stored config never downloads"):
            yield


def follow_reference(
    kind: str,
    value: str | os.PathLike,
    *,
    origin: str | None,
    said_in: Path | None,
    stored: bool,
    vouch_root: Path | None,
) -> Reference:
    """The reference ``kind: value`` and the rule it is read with.

    Args:
        kind: a key of :data:`REFERENCE_KINDS` (anything else is a programming error: list it there).
        value: the path as written.
        origin: where the value came from (a config's :meth:`~modforge.core.config.Config.where`);
            typed on the command line when :func:`~modforge.core.origins.typed_here` says so.
        said_in: the folder of the file that says it (relative paths written in a file are relative
            to it); ``None`` for a config without a file (relative to the current folder).
        stored: the config that says it is a stored one.
        vouch_root: for a reference written in a file the user passed, the folder of that file (what
            it may vouch for).
    """
    if kind not in REFERENCE_KINDS:
        raise KeyError(f"'{kind}' is not a reference kind modforge knows; add it to REFERENCE_KINDS")
    path = Path(os.path.expanduser(os.fspath(value)))
    if stored:
        trust = Trust.STORED
    elif typed_here(origin):
        trust = Trust.TYPED
    else:
        trust = Trust.FILE
    if not path.is_absolute():  # joined, not normalised: '..' after a link means what the system says it means
        path = (Path.cwd() if trust is Trust.TYPED or said_in is None else Path(said_in)) / path
    if trust is Trust.STORED:
        root = None
    elif trust is Trust.TYPED:
        root = path if path.is_dir() else path.parent  # the file the user typed vouches for what lies beside it
    else:
        root = vouch_root
    return Reference(kind, path, trust, root, origin or "")


def stored_data_downloads(stored: bool, origin: str | None) -> contextlib.AbstractContextManager[None]:
    """While a config's datasets are built: a *stored* config (``--resume``, ``test RUN``, ``export``,
    ``profile``, ``data show`` of a run) downloads nothing its file asks for — ``download: true``
    there is data, like a destination. Typed on this command line (``data.args.download=true``),
    the user asked: it is followed."""
    if not stored or typed_here(origin):
        return contextlib.nullcontext()
    return no_downloads("a stored config never downloads; add data.args.download=true to the command to fetch")


def references_in(key: str, value: Any) -> list[tuple[str, str]]:
    """The references that setting ``key`` (a dotted path) to ``value`` makes: ``(kind, path as
    written)`` for every string leaf of ``value`` whose key path (list indices dropped; the
    shorthand ``model.init: PATH`` included) is a kind of :data:`REFERENCE_KINDS`. What a sweep
    file's overrides point at is checked with it."""
    found: list[tuple[str, str]] = []
    _collect(key.split("."), value, found, 0)
    return found


def _collect(parts: list[str], value: Any, found: list[tuple[str, str]], depth: int) -> None:
    if depth > 32:
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            _collect([*parts, str(k)], v, found, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _collect(parts, v, found, depth + 1)  # list positions are not part of a kind's key
    elif isinstance(value, str):
        key = ".".join(p for p in parts if not p.lstrip("-").isdigit())
        key = "model.init.path" if key == "model.init" else key
        if key in REFERENCE_KINDS:
            found.append((key, value))


def may_carry_code(path: Path) -> bool:
    """Whether a referenced file can vouch for plug-ins when read: a config file (a run folder or
    checkpoint carries only copies signed with the user's own key; weights carry none)."""
    return path.suffix.lower() in (".yaml", ".yml") or (path.is_file() and path.suffix.lower() not in _WEIGHT_SUFFIXES)


_WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz", ".onnx")


def vouched_sources(sources: Mapping[str, Path], root: Path | None) -> dict[str, Path]:
    """The plug-in entries (entry → the folder of the config file that listed it) listed by a file
    inside ``root`` (its folder or below, links resolved): those a config read under ``root``'s
    vouching may import. ``None`` vouches for none."""
    if root is None:
        return {}
    return {entry: folder for entry, folder in sources.items() if _within(folder, root)}


def _within(folder: Path, top: Path) -> bool:
    """Whether ``folder`` (links resolved) lies in ``top`` or below."""
    try:
        Path(folder).resolve().relative_to(Path(top).resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True
