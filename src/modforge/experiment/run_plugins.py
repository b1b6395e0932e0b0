"""A run folder's own copy of the plug-in code it was trained with — signed by its user, for that run.

A config stored in a checkpoint is data: it vouches for no plug-in (see
:mod:`modforge.core.plugins`). So that ``modforge test RUN`` and ``--resume RUN`` still work
without retyping ``--plugins``, training copies every plug-in *file or package folder* the
run loaded into ``RUN/plugins/`` and writes ``RUN/plugins/manifest.json``.

**What is signed.** The manifest holds each copy's SHA-256 — of *every* file of a package
copy, bytecode caches included (caches are not copied, so a ``__pycache__`` found later
is a change like any other) — and an HMAC under a key only this user holds
(:func:`signing_key`). The HMAC covers the entries *and the run's identity*: the run folder's
real path at training time and a random run id drawn then. Another user cannot sign (no
key); a manifest copied with its copies into another run folder — a stranger's run made to
borrow your signed code — no longer matches the folder it lies in.

**What runs.** A copy is imported only when the signature is this user's for this very
folder, and its bytes, read without following any link and only from inside the run
folder, have the recorded digest. Those bytes — never the files again, never a cache — are
what runs (:func:`~modforge.core.plugins.load_verified_copy`). Anything else is *not
imported*, and why is part of the one-line error that the plug-in is not loaded.

**Older run folders** (a manifest signed over the entries only, before the run's identity
was signed) are refused like an unsigned one: their signature cannot tell your run from a
copy of it. To use such a run (or one you moved or copied yourself), check its copies and
name them: ``--plugins RUN/plugins/NAME``.

**The key** (``~/.config/modforge/run-signing.key``, or ``$MODFORGE_HOME/run-signing.key``)
is made on first use, mode 0600. Like ssh, modforge refuses a key that group or others may
read or write, one owned by another user, a key that is a link to nothing, and a key in a
folder someone else could change: its folder, or any folder above it, owned by another user
(root aside) or writable by group or others without the sticky bit (a world-writable
``MODFORGE_HOME`` would let anyone swap the key) — each one clear error raised *before* a
run folder is made (:func:`plugin_copies`).

Plug-ins that are installed modules are not copied: they must be installed (as
``modforge.plugins`` entry points) or given with ``--plugins`` again. When the user gives
``--plugins`` of their own, the copies stay unloaded: the user's code takes over.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from ..core.config import display_path
from ..core.errors import UsageError
from ..core.plugins import (
    USER_ORIGIN,
    load_verified_copy,
    loaded_plugin,
    loaded_plugins,
    plugin_entries,
    require_plugins,
)
from ..core.safe_files import ensure_folder, write_atomic
from ..core.text_safety import plain_text

__all__ = [
    "MANIFEST",
    "PluginCopies",
    "SigningKeyError",
    "check_signing_key",
    "key_path",
    "load_stored_plugins",
    "plugin_copies",
    "signing_key",
    "snapshot_plugins",
]

log = logging.getLogger("modforge.experiment")
FOLDER = "plugins"
MANIFEST = f"{FOLDER}/manifest.json"
KEY_FILE = "run-signing.key"
FORMAT = 2
"""Manifest format: 2 signs the run's identity with the entries (1 signed the entries only)."""
_KEY_BYTES = 32
_MAX_KEY_BYTES = 4096
_MAX_MANIFEST_BYTES = 1 << 20
_MAX_COPY_BYTES = 256 << 20
_MAX_COPY_FILES = 10_000
_MAX_COPY_DEPTH = 32
_CACHES = ("__pycache__",)
_CACHE_SUFFIXES = (".pyc", ".pyo")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class SigningKeyError(UsageError):
    """The run-signing key cannot be used safely (too open, another user's, a dangling link...)."""


class _Refused(Exception):
    """Why the run's copies are not imported (said in the error that they are not loaded)."""


class _NoCopies(Exception):
    """The run folder has no ``plugins/`` folder: there is nothing to explain."""


# ------------------------------------------------------------------------------ the key
def key_path() -> Path:
    """Where this user's run-signing key lives (``$MODFORGE_HOME`` or ``~/.config/modforge``)."""
    home = os.environ.get("MODFORGE_HOME")
    return Path(home if home else Path.home() / ".config" / "modforge") / KEY_FILE


def signing_key(create: bool = False) -> bytes | None:
    """This user's key for run manifests; ``None`` when there is none (and ``create`` is false).

    ``create`` makes a missing key (its folder 0700, the key 0600, never through a link).

    Raises:
        SigningKeyError: the key is readable or writable by group or others, owned by another
            user, not a regular file, too short, a link to nothing, or cannot be read or made;
            its folder (or one above) is another user's or writable by others (:func:`_check_key_folders`);
            or ``$MODFORGE_HOME`` names a folder that does not exist.
    """
    path = key_path()
    home = path.parent
    if os.environ.get("MODFORGE_HOME") and not home.is_dir():
        raise SigningKeyError(f"MODFORGE_HOME={plain_text(home)} is not an existing folder; the run-signing key "
                              "lives there (create it with mkdir -m 700, or unset MODFORGE_HOME)")  # fmt: skip
    if os.path.lexists(path):
        _check_key_folders(home)
        return _read_key(path)
    if not create:
        return None
    _check_key_folders(home)
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    except FileExistsError:  # another process made it a moment ago
        return _read_key(path)
    except OSError as exc:
        raise SigningKeyError(f"cannot make the run-signing key {plain_text(path)} ({exc.strerror or exc}); "
                              "set MODFORGE_HOME to a folder of yours") from None  # fmt: skip
    with os.fdopen(fd, "wb") as file:
        file.write(secrets.token_bytes(_KEY_BYTES))
        file.flush()
        os.fsync(file.fileno())
    return _read_key(path)


def _folder_problem(info: os.stat_result, uid: int) -> str | None:
    """Why a folder on the key's path lets someone else replace the key; None when it does not."""
    if info.st_uid not in (uid, 0):
        return f"is owned by another user (uid {info.st_uid})"
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        return f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o}, no sticky bit)"
    return None


def _check_key_folders(home: Path) -> None:
    """Refuse, as ssh refuses a key below a folder others may change, a key folder (or, when it is not made
    yet, its nearest existing folder) that — or any folder above which — is owned by another user than you
    or root, or is writable by group or others without the sticky bit: whoever can write there can put
    their own key in place of yours and sign run folders as you."""
    if not hasattr(os, "getuid"):
        return
    folder = Path(os.path.realpath(home))
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    for current in (folder, *folder.parents):
        try:
            problem = _folder_problem(os.stat(current), os.getuid())
        except OSError as exc:
            raise SigningKeyError(f"cannot check the run-signing key's folder {plain_text(current)} "
                                  f"({exc.strerror or exc})") from None  # fmt: skip
        if problem is None:
            continue
        shown = plain_text(current)
        where = shown if current == folder else f"{plain_text(folder)} lies in {shown}, which"
        chmod = f"chmod 700 {shown}, or " if current == folder and "writable" in problem else ""
        raise SigningKeyError(f"the run-signing key's folder {where} {problem}: whoever can change it could "
                              f"replace your key; {chmod}set MODFORGE_HOME to a folder only you can change "
                              "(mkdir -m 700 FOLDER)")  # fmt: skip


def _read_key(path: Path) -> bytes:
    """The key at ``path``, checked as ssh checks a private key (on the open descriptor)."""
    shown = plain_text(path)
    try:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC | _NONBLOCK)
    except FileNotFoundError:
        target = plain_text(os.readlink(path)) if os.path.islink(path) else "?"
        raise SigningKeyError(f"the run-signing key {shown} is a symbolic link to {target}, which does not exist; "
                              "restore the key it pointed to, or remove the link (a new key is then made, and "
                              "runs signed with the old one no longer load their plug-in copies)") from None  # fmt: skip
    except OSError as exc:
        raise SigningKeyError(f"cannot read the run-signing key {shown} ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SigningKeyError(f"the run-signing key {shown} is not a regular file")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise SigningKeyError(f"the run-signing key {shown} is owned by another user (uid {info.st_uid}); "
                                  "modforge signs only with a key you own")  # fmt: skip
        if info.st_mode & 0o077:
            raise SigningKeyError(f"permissions {stat.S_IMODE(info.st_mode):04o} for {shown} are too open: the "
                                  f"run-signing key must be readable by you only (chmod 600 {shown})")  # fmt: skip
        key = file.read(_MAX_KEY_BYTES + 1)
    if not _KEY_BYTES <= len(key) <= _MAX_KEY_BYTES:
        raise SigningKeyError(f"the run-signing key {shown} holds {len(key)} bytes, expected {_KEY_BYTES} to "
                              f"{_MAX_KEY_BYTES}; remove it to have a new one made")  # fmt: skip
    return key


def _copyable(plugins: Iterable[str]) -> list[tuple[str, Path]]:
    """The plug-ins behind ``plugins`` that are files or package folders (entry, source)."""
    found = []
    for entry in plugins:
        record = loaded_plugin(entry)
        if record is not None and record.path is not None:
            found.append((entry, record.path))
    return found


@dataclasses.dataclass(frozen=True)
class PluginCopies:
    """The plug-in files and package folders a run copies into its folder, found (and the signing key
    made usable) *before* the folder exists — a bad key is one error and no half-made run folder —
    and written into it by :meth:`write` once it does.

    Attributes:
        sources: ``(entry, source path)`` of each plug-in that is a file or a package folder.
        key: the run-signing key (None when there is nothing to copy).
    """

    sources: tuple[tuple[str, Path], ...]
    key: bytes | None = dataclasses.field(repr=False)  # never in a log line or a traceback

    def write(self, run_dir: Path) -> dict[str, dict[str, str]]:
        """Copy the sources into ``run_dir/plugins`` and write the manifest, signed for this run;
        return its entries (entry → ``{"copy", "sha256"}``)."""
        if self.key is None:
            return {}
        folder = ensure_folder(run_dir / FOLDER)
        entries: dict[str, dict[str, str]] = {}
        copied: dict[Path, tuple[str, str]] = {}  # one copy per source, however many entries name it
        for entry, source in self.sources:
            if source not in copied:
                name, n = source.name, 1
                while os.path.lexists(folder / name) or name == "manifest.json":
                    n += 1
                    name = f"{source.stem}-{n}{source.suffix}"
                content = _source_files(source) if source.is_dir() else source.read_bytes()
                _write_copy(folder, name, content)
                copied[source] = (name, _digest_of(content))
            name, sha = copied[source]
            entries[entry] = {"copy": name, "sha256": sha}
        identity = {"format": FORMAT, "run": secrets.token_hex(16), "folder": str(run_dir.resolve())}
        manifest = {**identity, "entries": entries, "hmac": _signature(self.key, identity, entries)}
        write_atomic(run_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        return entries


def plugin_copies(plugins: Iterable[str] | None) -> PluginCopies:
    """What a run of ``plugins`` will copy into its folder; called before the folder is made.

    Raises:
        SigningKeyError: the key cannot be used (see :func:`signing_key`).
    """
    sources = tuple(_copyable(plugins or ()))
    return PluginCopies(sources, signing_key(create=True) if sources else None)


def check_signing_key(plugins: Iterable[str] | None) -> None:
    """Make sure a run of ``plugins`` can sign its copies — called before its folder is made,
    so a bad key is one error and no half-made run folder.

    Raises:
        SigningKeyError: see :func:`signing_key`.
    """
    plugin_copies(plugins)


def _signature(key: bytes, identity: Mapping[str, object], entries: Mapping[str, object]) -> str:
    message = json.dumps({"identity": identity, "entries": entries}, sort_keys=True, ensure_ascii=True)
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


# ------------------------------------------------------------------------------ digests
def _digest_of(content: bytes | Mapping[str, bytes]) -> str:
    """SHA-256 of a file's bytes, or of a folder's files (relative names and contents, sorted)."""
    if isinstance(content, bytes):
        return hashlib.sha256(content).hexdigest()
    sha = hashlib.sha256()
    for rel in sorted(content):
        sha.update(rel.encode() + b"\0")
        sha.update(hashlib.sha256(content[rel]).digest())
    return sha.hexdigest()


# ------------------------------------------------------------------------------ copying
def _source_files(folder: Path) -> dict[str, bytes]:
    """The files of the user's package folder, bytecode caches left out (a link inside it is
    the user's own: its content is copied)."""
    files: dict[str, bytes] = {}
    seen = {folder.resolve()}
    pending = [(folder, "")]
    while pending:
        current, prefix = pending.pop()
        for item in sorted(current.iterdir()):
            rel = f"{prefix}{item.name}"
            if item.is_dir():
                real = item.resolve()
                if item.name not in _CACHES and real not in seen:
                    seen.add(real)
                    pending.append((item, rel + "/"))
            elif item.is_file() and not item.name.endswith(_CACHE_SUFFIXES):
                files[rel] = item.read_bytes()
    return files


def _write_copy(folder: Path, name: str, content: bytes | Mapping[str, bytes]) -> None:
    target = folder / name
    if isinstance(content, bytes):
        write_atomic(target, content)
        return
    ensure_folder(target)
    for rel, data in content.items():
        ensure_folder((target / rel).parent)
        write_atomic(target / rel, data)


def snapshot_plugins(plugins: Iterable[str], run_dir: Path) -> dict[str, dict[str, str]]:
    """Copy the plug-in files and package folders behind ``plugins`` into ``run_dir/plugins``
    and write the manifest, signed for this run; return its entries (entry → ``{"copy", "sha256"}``).

    Raises:
        SigningKeyError: the key cannot be used (see :func:`signing_key`); take
            :func:`plugin_copies` before making the run folder to fail earlier.
    """
    return plugin_copies(plugins).write(run_dir)


# ------------------------------------------------------------------------------ reading back
@contextlib.contextmanager
def _opened(name: str, dir_fd: int, *, folder: bool = False) -> Iterator[int]:
    """A descriptor on ``name`` inside the folder ``dir_fd``, never through a link."""
    flags = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | (_DIRECTORY if folder else _NONBLOCK)
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _kind(name: str, dir_fd: int) -> str:
    """``"file"``, ``"folder"`` or what else ``name`` is (never following a link)."""
    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    return "a symbolic link" if stat.S_ISLNK(mode) else "neither a regular file nor a folder"


def _read_file(name: str, dir_fd: int, shown: str, budget: list[int]) -> bytes:
    with _opened(name, dir_fd) as fd:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Refused(f"{shown} is not a regular file")
        budget[0] -= info.st_size
        if budget[0] < 0:
            raise _Refused(f"{shown} is too large to read (more than {budget[1] >> 10} KiB in all)")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read(info.st_size + 1)


def _read_folder(dir_fd: int, shown: str, budget: list[int], prefix: str = "") -> dict[str, bytes]:
    """Every file below the folder ``dir_fd`` (relative name → bytes); a link or special file refuses."""
    if prefix.count("/") > _MAX_COPY_DEPTH:
        raise _Refused(f"{shown} has folders more than {_MAX_COPY_DEPTH} deep")
    files: dict[str, bytes] = {}
    for name in sorted(os.listdir(dir_fd)):
        rel = f"{prefix}{name}"
        kind = _kind(name, dir_fd)
        if kind == "file":
            files[rel] = _read_file(name, dir_fd, f"{shown}/{plain_text(rel)}", budget)
        elif kind == "folder":
            with _opened(name, dir_fd, folder=True) as sub:
                files.update(_read_folder(sub, shown, budget, rel + "/"))
        else:
            raise _Refused(f"{shown}/{plain_text(rel)} is {kind}")
        if len(files) > _MAX_COPY_FILES:
            raise _Refused(f"{shown} holds more than {_MAX_COPY_FILES} files")
    return files


class _Store:
    """A run's ``plugins/`` folder, opened once without following links, and its manifest."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(os.path.realpath(run_dir))
        self.shown = display_path(self.run_dir / FOLDER)
        self.fd = -1
        try:
            run_fd = os.open(self.run_dir, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        except OSError as exc:
            raise _Refused(f"cannot open the run folder {display_path(self.run_dir)} ({exc.strerror or exc})") from None
        try:
            kind = _kind(FOLDER, run_fd)
            if kind != "folder":
                raise _Refused(f"{self.shown} is {kind}; a run's plug-in copies are read only from a real folder "
                               "inside it")  # fmt: skip
            self.fd = os.open(FOLDER, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=run_fd)
        except FileNotFoundError:
            raise _NoCopies from None
        except OSError as exc:
            raise _Refused(f"cannot open {self.shown} ({exc.strerror or exc})") from None
        finally:
            os.close(run_fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def manifest(self) -> dict:
        """The manifest's entries, when this user signed it for this run folder."""
        shown = f"{self.shown}/manifest.json"
        try:
            kind = _kind("manifest.json", self.fd)
            if kind != "file":
                raise _Refused(f"{shown} is {kind}, not the run's own manifest")
            data = _read_file("manifest.json", self.fd, shown, [_MAX_MANIFEST_BYTES, _MAX_MANIFEST_BYTES])
            manifest = json.loads(data)
        except FileNotFoundError:
            raise _Refused(f"{shown} does not exist") from None
        except (OSError, ValueError, RecursionError):
            raise _Refused(f"{shown} cannot be read as a manifest") from None
        entries = manifest.get("entries") if isinstance(manifest, dict) else None
        signature = manifest.get("hmac") if isinstance(manifest, dict) else None
        if not isinstance(entries, dict) or not isinstance(signature, str) or not signature.isascii():
            raise _Refused(f"{shown} is not signed by you")
        if manifest.get("format") != FORMAT:
            raise _Refused(f"{shown} was signed by an older modforge without the run's identity, so it cannot tell "
                           f"your run from a copy of it; check the copies and name them with --plugins "
                           f"{self.shown}/NAME")  # fmt: skip
        identity = {k: manifest.get(k) for k in ("format", "run", "folder")}
        key = signing_key()
        if key is None:
            raise _Refused(f"{shown} is not signed by you (you have no run-signing key at {plain_text(key_path())})")
        if not hmac.compare_digest(signature.encode(), _signature(key, identity, entries).encode()):
            raise _Refused(f"{shown} is not signed by you (another user's run, or edited)")
        if identity["folder"] != str(self.run_dir):
            raise _Refused(f"{shown} was signed for the run folder {plain_text(identity['folder'])}, not this one "
                           f"({self.run_dir}): a moved or copied run does not load its copies by itself; check them "
                           f"and name them with --plugins {self.shown}/NAME")  # fmt: skip
        return entries

    def read_copy(self, entry: str, recorded: object) -> tuple[Path, bytes | dict[str, bytes]]:
        """The bytes of the copy of ``entry`` (a file's, or a package's files), checked against the digest."""
        copy = recorded.get("copy") if isinstance(recorded, dict) else None
        sha = recorded.get("sha256") if isinstance(recorded, dict) else None
        if not isinstance(copy, str) or not isinstance(sha, str) or not copy or copy in (".", "..") \
                or "/" in copy or "\\" in copy or "\x00" in copy or copy == "manifest.json":  # fmt: skip
            raise _Refused(f"the manifest's record of plug-in {plain_text(entry)} is malformed")
        shown = f"{self.shown}/{plain_text(copy)}"
        budget = [_MAX_COPY_BYTES, _MAX_COPY_BYTES]
        try:
            kind = _kind(copy, self.fd)
            if kind == "file":
                content: bytes | dict[str, bytes] = _read_file(copy, self.fd, shown, budget)
            elif kind == "folder":
                with _opened(copy, self.fd, folder=True) as fd:
                    content = _read_folder(fd, shown, budget)
            else:
                raise _Refused(f"{shown} is {kind}")
        except FileNotFoundError:
            raise _Refused(f"the copy {shown} of plug-in {plain_text(entry)} is missing") from None
        except OSError as exc:
            raise _Refused(f"cannot read {shown} ({exc.strerror or exc})") from None
        if not hmac.compare_digest(_digest_of(content).encode(), sha.encode()):
            raise _Refused(f"the run's copy {shown} of plug-in {plain_text(entry)} changed since training "
                           "(SHA-256 differs)")  # fmt: skip
        return self.run_dir / FOLDER / copy, content


def _load_copies(entries: list[str], run_dir: Path) -> str:
    """Import the run's verified copies of ``entries`` that are not loaded yet; return why
    some could not be (empty when there was nothing to refuse)."""
    needed = [entry for entry in entries if loaded_plugin(entry) is None]
    if not needed:
        return ""
    reasons = []
    try:
        store = _Store(run_dir)
    except _NoCopies:
        return ""
    except _Refused as exc:
        return f"the run's own copies were not used: {exc}"
    try:
        manifest = store.manifest()
        for entry in needed:
            if loaded_plugin(entry) is not None or entry not in manifest:
                continue  # loaded meanwhile as part of another copy, or never copied (an installed module)
            try:
                copy, content = store.read_copy(entry, manifest[entry])
            except _Refused as exc:
                reasons.append(str(exc))
                continue
            load_verified_copy(entry, copy, f"the run's own copy {display_path(copy)} (SHA-256 as recorded)", content)
    except _Refused as exc:
        reasons.append(str(exc))
    finally:
        store.close()
    return f"the run's own copies were not used: {'; '.join(reasons)}" if reasons else ""


def load_stored_plugins(plugins: Iterable[str] | None, *, run_dir: Path | None, what: str) -> list[str]:
    """Make a stored config's plug-ins available without trusting the config: the run
    folder's verified copies (unless the user gave ``--plugins`` of their own), installed
    entry points and what the user gave with ``--plugins``; anything else is one clear error
    (see :func:`~modforge.core.plugins.require_plugins`), which says why the run's copies
    were not used. Returns the plug-in entries to build with.

    Raises:
        PluginError: a plug-in is not loaded (and why the run's copy was not imported).
        SigningKeyError: the run's copies are needed and the user's key cannot be used safely.
    """
    entries = plugin_entries(plugins, what)
    users_own = any(record.origin == USER_ORIGIN for record in loaded_plugins())
    note = ""
    if run_dir is not None and entries and not users_own:
        note = _load_copies(entries, run_dir)
    return require_plugins(plugins, what=what, note=note)
