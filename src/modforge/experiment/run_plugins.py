"""A run folder's own copy of the plug-in code it was trained with — signed by its user.

A config stored in a checkpoint is data: it vouches for no plug-in (see
:mod:`modforge.core.plugins`). So that ``modforge test RUN`` and ``--resume RUN`` still work
without retyping ``--plugins``, training copies every plug-in *file or package folder* the
run loaded into ``RUN/plugins/`` and writes ``RUN/plugins/manifest.json``: each copy's
SHA-256, and an HMAC of the whole manifest under a key only this user holds
(``~/.config/modforge/run-signing.key``, created on first use with mode 0600;
``MODFORGE_HOME`` moves it). Later a copy is imported only when the manifest's signature is
this user's, the copy sits inside that folder and its content has the recorded digest — so a
run folder someone else hands you is data too (its copies load only if you name them with
``--plugins``), and code changed after training is reported, never run.

Plug-ins that are installed modules are not copied: they must be installed (as
``modforge.plugins`` entry points) or given with ``--plugins`` again. When the user gives
``--plugins`` of their own, the copies stay unloaded: the user's code takes over.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path

from ..core.config import display_path
from ..core.plugins import (
    USER_ORIGIN,
    load_verified_copy,
    loaded_plugin,
    loaded_plugins,
    plugin_entries,
    require_plugins,
)

__all__ = ["MANIFEST", "load_stored_plugins", "signing_key", "snapshot_plugins"]

log = logging.getLogger("modforge.experiment")
FOLDER = "plugins"
MANIFEST = f"{FOLDER}/manifest.json"
KEY_FILE = "run-signing.key"
_MAX_MANIFEST_BYTES = 1 << 20
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def signing_key(create: bool = False) -> bytes | None:
    """This user's key for run manifests (``$MODFORGE_HOME`` or ``~/.config/modforge``);
    created when ``create`` and absent; ``None`` when there is none or it cannot be made."""
    home = Path(os.environ.get("MODFORGE_HOME") or Path.home() / ".config" / "modforge")
    path = home / KEY_FILE
    try:
        if path.is_file():
            key = path.read_bytes()
            return key if len(key) >= 32 else None
        if not create:
            return None
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(secrets.token_bytes(32))
        return path.read_bytes()
    except FileExistsError:  # another process made it a moment ago
        return path.read_bytes()
    except OSError as exc:
        log.warning("cannot use a run-signing key at %s (%s): run folders will not reload their own plug-ins",
                    path, exc)  # fmt: skip
        return None


def _signature(key: bytes, entries: dict) -> str:
    return hmac.new(key, json.dumps(entries, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def digest(path: Path) -> str:
    """SHA-256 of a file, or of a folder's files (relative names and contents, sorted;
    bytecode caches left out)."""
    sha = hashlib.sha256()
    if path.is_file():
        sha.update(path.read_bytes())
        return sha.hexdigest()
    for item in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        sha.update(item.relative_to(path).as_posix().encode() + b"\0")
        sha.update(hashlib.sha256(item.read_bytes()).digest())
    return sha.hexdigest()


def snapshot_plugins(plugins: Iterable[str], run_dir: Path) -> dict[str, dict[str, str]]:
    """Copy the plug-in files and package folders behind ``plugins`` into ``run_dir/plugins``
    and write the signed manifest; return its entries (entry → ``{"copy", "sha256"}``)."""
    entries: dict[str, dict[str, str]] = {}
    copied: dict[Path, str] = {}  # one copy per source, however many entries name it
    folder = run_dir / FOLDER
    for entry in plugins:
        record = loaded_plugin(entry)
        if record is None or record.path is None:
            continue  # an installed module: not ours to copy
        source = record.path
        if source not in copied:
            name, n = source.name, 1
            while (folder / name).exists():
                n += 1
                name = f"{source.stem}-{n}{source.suffix}"
            folder.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, folder / name, ignore=_IGNORED)
            else:
                shutil.copy2(source, folder / name)
            copied[source] = name
        name = copied[source]
        entries[entry] = {"copy": name, "sha256": digest(folder / name)}
    if entries:
        key = signing_key(create=True)
        manifest = {"entries": entries, "hmac": _signature(key, entries) if key else None}
        (run_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return entries


def _signed_entries(run_dir: Path) -> dict:
    """The manifest's entries when this user signed it; ``{}`` otherwise (said once, why)."""
    path = run_dir / MANIFEST
    if not path.is_file():
        return {}
    try:
        manifest = json.loads(path.read_text()) if path.stat().st_size <= _MAX_MANIFEST_BYTES else None
    except (ValueError, OSError, UnicodeDecodeError):
        manifest = None
    entries = manifest.get("entries") if isinstance(manifest, dict) else None
    key = signing_key()
    signature = manifest.get("hmac") if isinstance(manifest, dict) else None
    if not isinstance(entries, dict) or key is None or not isinstance(signature, str) or not hmac.compare_digest(
        signature, _signature(key, entries)
    ):
        log.warning("%s is not signed by you (another user's run, or edited): its plug-in copies are not "
                    "imported; name the code with --plugins", display_path(path))  # fmt: skip
        return {}
    return entries


def _load_copies(entries: list[str], run_dir: Path) -> None:
    """Import the run's verified copies of ``entries`` that are not loaded yet."""
    manifest = _signed_entries(run_dir)
    folder = (run_dir / FOLDER).resolve()
    for entry in entries:
        recorded = manifest.get(entry)
        if loaded_plugin(entry) is not None or not isinstance(recorded, dict):
            continue
        copy = (folder / str(recorded.get("copy", ""))).resolve()
        if copy.parent != folder or not copy.exists():
            log.warning("the run's copy of plug-in %s is missing or lies outside %s; not used", entry, folder)
            continue
        source = copy.read_bytes() if copy.is_file() else None
        found = hashlib.sha256(source).hexdigest() if source is not None else digest(copy)
        if found != recorded.get("sha256"):
            log.warning("the run's copy of plug-in %s (%s) changed since training (SHA-256 differs); not imported",
                        entry, display_path(copy))  # fmt: skip
            continue
        load_verified_copy(entry, copy, f"the run's own copy {display_path(copy)} (SHA-256 as recorded)", source)


def load_stored_plugins(plugins: Iterable[str] | None, *, run_dir: Path | None, what: str) -> list[str]:
    """Make a stored config's plug-ins available without trusting the config: the run
    folder's verified copies (unless the user gave ``--plugins`` of their own), installed
    entry points and what the user gave with ``--plugins``; anything else is one clear error
    (see :func:`~modforge.core.plugins.require_plugins`). Returns the plug-in entries to build with."""
    entries = plugin_entries(plugins, what)
    users_own = any(record.origin == USER_ORIGIN for record in loaded_plugins())
    if run_dir is not None and entries and not users_own:
        _load_copies(entries, run_dir)
    return require_plugins(plugins, what=what)
