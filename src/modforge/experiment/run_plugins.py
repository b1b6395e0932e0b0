"""A run folder's own copy of the plug-in code it was trained with.

A config stored in a checkpoint is data: it vouches for no plug-in (see
:mod:`modforge.core.plugins`). So that ``modforge test RUN`` and ``--resume RUN`` still work
without retyping ``--plugins``, training copies every plug-in *file or package folder* the
run loaded into ``RUN/plugins/`` and records each copy's SHA-256 in
``RUN/plugins/manifest.json``. Later, a copy is imported only when it sits inside that
folder and its content still has the recorded digest — code changed after training is
reported, never run. Plug-ins that are installed modules are not copied: they must be
installed (as ``modforge.plugins`` entry points) or given with ``--plugins`` again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

from ..core.config import display_path
from ..core.plugins import load_verified_copy, loaded_plugin, require_plugins

__all__ = ["MANIFEST", "load_stored_plugins", "snapshot_plugins"]

log = logging.getLogger("modforge.experiment")
FOLDER = "plugins"
MANIFEST = f"{FOLDER}/manifest.json"
_MAX_MANIFEST_BYTES = 1 << 20
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def digest(path: Path) -> str:
    """SHA-256 of a file, or of a folder's files (relative names and contents, sorted)."""
    sha = hashlib.sha256()
    if path.is_file():
        sha.update(path.read_bytes())
        return sha.hexdigest()
    for item in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if item.suffix == ".pyc":
            continue
        sha.update(item.relative_to(path).as_posix().encode() + b"\0")
        sha.update(hashlib.sha256(item.read_bytes()).digest())
    return sha.hexdigest()


def snapshot_plugins(plugins: Iterable[str], run_dir: Path) -> dict[str, dict[str, str]]:
    """Copy the plug-in files and package folders behind ``plugins`` into ``run_dir/plugins``
    and write the manifest; return it (entry → ``{"copy", "sha256"}``)."""
    manifest: dict[str, dict[str, str]] = {}
    folder = run_dir / FOLDER
    for entry in plugins:
        record = loaded_plugin(entry)
        if record is None or record.path is None:
            continue  # an installed module: not ours to copy
        source = record.path
        name, n = source.name, 1
        while (folder / name).exists():
            n += 1
            name = f"{source.stem}-{n}{source.suffix}"
        target = folder / name
        folder.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=_IGNORED)
        else:
            shutil.copy2(source, target)
        manifest[entry] = {"copy": name, "sha256": digest(target)}
    if manifest:
        (run_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _manifest(run_dir: Path) -> dict:
    path = run_dir / MANIFEST
    if not path.is_file() or path.stat().st_size > _MAX_MANIFEST_BYTES:
        return {}
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, OSError, UnicodeDecodeError):
        log.warning("%s is unreadable; the run's plug-in copies are not used", display_path(path))
        return {}
    return manifest if isinstance(manifest, dict) else {}


def _load_copies(entries: list[str], run_dir: Path) -> None:
    """Import the run's verified copies of ``entries`` that are not loaded yet."""
    manifest = _manifest(run_dir)
    folder = (run_dir / FOLDER).resolve()
    for entry in entries:
        recorded = manifest.get(entry)
        if loaded_plugin(entry) is not None or not isinstance(recorded, dict):
            continue
        copy = (folder / str(recorded.get("copy", ""))).resolve()
        if copy.parent != folder or not copy.exists():
            log.warning("the run's copy of plug-in %s is missing or lies outside %s; not used", entry, folder)
            continue
        if digest(copy) != recorded.get("sha256"):
            log.warning("the run's copy of plug-in %s (%s) changed since training (SHA-256 differs); not imported",
                        entry, display_path(copy))  # fmt: skip
            continue
        load_verified_copy(entry, copy, origin=f"the run's own copy {display_path(copy)} (SHA-256 as recorded)")


def load_stored_plugins(plugins: Iterable[str] | None, *, run_dir: Path | None, what: str) -> list[str]:
    """Make a stored config's plug-ins available without trusting the config: the run
    folder's verified copies, installed entry points and what the user gave with
    ``--plugins``; anything else is one clear error (see
    :func:`~modforge.core.plugins.require_plugins`). Returns the plug-in entries to build with."""
    entries = [plugins] if isinstance(plugins, str) else [p for p in plugins or [] if isinstance(p, str)]
    if run_dir is not None and entries:
        _load_copies(entries, run_dir)
    return require_plugins(plugins, what=what)
