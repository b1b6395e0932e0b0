"""Unpacking a downloaded archive into a folder, safely and all-or-nothing.

:func:`extract_archive` handles ``.tar``, ``.tar.gz``/``.tgz`` (also ``.tar.bz2``/``.tar.xz``),
``.zip`` and a single-file ``.gz``. Every member is checked before anything is written: no
absolute name, no ``..``, no link leading out, no device or FIFO, no link at all in a zip; a
hostile member is one :class:`UnsafeArchiveError` naming the archive and the member. Tar files
are then extracted with ``filter="data"`` (where Python has it; otherwise only plain files and
folders are written, by modforge itself).

The members go into a fresh temporary folder inside the target, and are moved into place only
when all of them are out; a marker ``.modforge-extracted-<archive name>`` holding the archive's
SHA-256 is written last. A re-run with the same archive finds the marker and does nothing; an
extraction cut short (no marker) is done again, replacing the files it had already moved.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path

from ..core.errors import UsageError
from ..core.safe_files import UnsafePathError, atomic_open, ensure_folder, is_relative_name, open_regular, write_atomic
from .download import file_checksum

__all__ = ["ARCHIVE_SUFFIXES", "ArchiveError", "UnsafeArchiveError", "archive_kind", "extract_archive", "marker_path"]

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip", ".gz")
MARKER_PREFIX = ".modforge-extracted-"
STAGING_PREFIX = ".modforge-extracting-"


class ArchiveError(UsageError):
    """An archive that cannot be read (damaged, truncated, not the kind its name says)."""


class UnsafeArchiveError(UnsafePathError):
    """An archive member that would land outside the folder, or is a link, device or FIFO;
    nothing of the archive was put in place."""


def archive_kind(archive: str | os.PathLike) -> str:
    """``"tar"``, ``"zip"`` or ``"gz"`` (one compressed file) from the archive's name."""
    name = Path(archive).name.lower()
    if name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")):
        return "tar"
    if name.endswith(".zip"):
        return "zip"
    if name.endswith(".gz"):
        return "gz"
    raise ArchiveError(f"{archive}: not an archive modforge unpacks (expected one of {', '.join(ARCHIVE_SUFFIXES)})")


def marker_path(archive: str | os.PathLike, into: str | os.PathLike) -> Path:
    """The file that says ``archive`` was extracted completely into ``into``."""
    return Path(into) / f"{MARKER_PREFIX}{Path(archive).name}"


def extract_archive(archive: str | os.PathLike, into: str | os.PathLike) -> list[Path]:
    """Unpack ``archive`` into the folder ``into`` (created); return the top-level paths it made there.

    Raises:
        UnsafeArchiveError: a member that would leave ``into``, a link out of it, a device...;
            names the archive and the member. Nothing was put in place.
        ArchiveError: the archive is damaged or not what its name says.
    """
    archive, into = Path(archive), Path(into)
    kind = archive_kind(archive)
    try:
        checksum = file_checksum(archive, "sha256")
    except FileNotFoundError:
        raise ArchiveError(f"{archive}: no such file") from None
    ensure_folder(into, named=True)
    marker = marker_path(archive, into)
    done = _finished(marker, checksum, into)
    if done is not None:
        return done
    _remove_stale_staging(archive, into)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{archive.name}.", dir=into))
    try:
        if kind == "tar":
            _extract_tar(archive, staging)
        elif kind == "zip":
            _extract_zip(archive, staging)
        else:
            _extract_gz(archive, staging)
        tops = sorted(entry.name for entry in os.scandir(staging))
        for name in tops:
            _move_into(staging / name, into / name, archive)
    finally:
        _remove_real_folder(staging)
    record = {"archive": archive.name, "sha256": checksum, "entries": tops}
    write_atomic(marker, json.dumps(record, indent=1) + "\n")
    return [into / name for name in tops]


# ----------------------------------------------------------------------------- marker
def _finished(marker: Path, checksum: str, into: Path) -> list[Path] | None:
    """The paths of a finished extraction of this very archive, or ``None`` (no marker, another
    archive's checksum, or a path it made is gone)."""
    try:
        with open_regular(marker, "r") as handle:
            record = json.loads(handle.read(1 << 20))
    except (OSError, ValueError, UsageError):
        return None
    if not isinstance(record, dict) or record.get("sha256") != checksum:
        return None
    entries = record.get("entries")
    if not isinstance(entries, list) or not all(is_relative_name(e) and "/" not in e for e in entries):
        return None
    paths = [into / name for name in entries]
    return paths if all(os.path.lexists(p) for p in paths) else None


def _remove_stale_staging(archive: Path, into: Path) -> None:
    """Temporary folders an interrupted extraction of this archive left behind."""
    prefix = f"{STAGING_PREFIX}{archive.name}."
    with os.scandir(into) as entries:
        stale = [Path(e.path) for e in entries if e.name.startswith(prefix)]
    for path in stale:
        _remove_real_folder(path)


def _remove_real_folder(path: Path) -> None:
    """Remove ``path`` when it is a real folder (not a link to one); links inside are removed, not followed."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- checks
def _refuse(archive: Path, member: str, problem: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(f"archive {archive}: member {member!r} {problem}; refused, nothing of the archive "
                              "was extracted")  # fmt: skip


def _check_name(archive: Path, name: str) -> None:
    stripped = name.rstrip("/")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise _refuse(archive, name, "has an absolute name")
    if not stripped or not is_relative_name(stripped):
        raise _refuse(archive, name, "leads outside the folder ('..' or an unusable name)")


def _check_tar_member(archive: Path, member: tarfile.TarInfo, links_allowed: bool) -> None:
    _check_name(archive, member.name)
    if member.isreg() or member.isdir():
        return
    if member.issym() or member.islnk():
        if not links_allowed:
            raise _refuse(archive, member.name, f"is a link (to {member.linkname!r})")
        target = member.linkname
        if not target or target.startswith(("/", "\\")) or (len(target) > 1 and target[1] == ":"):
            raise _refuse(archive, member.name, f"is a link to the absolute path {target!r}")
        joined = posixpath.join(posixpath.dirname(member.name), target) if member.issym() else target
        resolved = posixpath.normpath(joined)
        if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
            raise _refuse(archive, member.name, f"is a link to {target!r}, outside the folder")
        return
    kind = "a device" if member.ischr() or member.isblk() else "a FIFO" if member.isfifo() else "a special file"
    raise _refuse(archive, member.name, f"is {kind}")


# ----------------------------------------------------------------------------- tar
_DATA_FILTER = getattr(tarfile, "data_filter", None)


def _extract_tar(archive: Path, staging: Path) -> None:
    try:
        with open_regular(archive, "rb") as raw, tarfile.open(fileobj=raw, mode="r:*") as tar:
            members = tar.getmembers()
            for member in members:
                _check_tar_member(archive, member, links_allowed=_DATA_FILTER is not None)
            if _DATA_FILTER is not None:
                try:
                    tar.extractall(staging, members=members, filter="data")
                except tarfile.FilterError as exc:
                    member = getattr(exc, "tarinfo", None)
                    raise _refuse(archive, getattr(member, "name", "?"), str(exc)) from None
            else:  # a Python without tarfile filters: plain files and folders only, written here
                _extract_tar_by_hand(tar, members, staging)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        if isinstance(exc, UsageError):
            raise
        raise ArchiveError(f"archive {archive} cannot be read ({_why(exc)}); delete it and download it again") from None


def _extract_tar_by_hand(tar: tarfile.TarFile, members: list[tarfile.TarInfo], staging: Path) -> None:
    for member in members:
        target = staging / member.name.rstrip("/")
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        assert source is not None
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with source, open(fd, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)


# ----------------------------------------------------------------------------- zip
def _extract_zip(archive: Path, staging: Path) -> None:
    try:
        with open_regular(archive, "rb") as raw, zipfile.ZipFile(raw) as zf:
            infos = zf.infolist()
            for info in infos:
                _check_name(archive, info.filename)
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise _refuse(archive, info.filename, "is a symbolic link")
                if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_IFMT(mode) == 0):
                    raise _refuse(archive, info.filename, "is not a regular file or folder")
            for info in infos:
                target = staging / info.filename
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
                with zf.open(info) as source, open(fd, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error, NotImplementedError) as exc:
        if isinstance(exc, UsageError):
            raise
        if isinstance(exc, FileExistsError):  # one name twice in the zip
            raise _refuse(archive, Path(exc.filename or "?").name, "appears twice") from None
        raise ArchiveError(f"archive {archive} cannot be read ({_why(exc)}); delete it and download it again") from None


# ----------------------------------------------------------------------------- gz
def _extract_gz(archive: Path, staging: Path) -> None:
    name = archive.name[: -len(".gz")]
    _check_name(archive, name)
    try:
        with open_regular(archive, "rb") as raw, gzip.GzipFile(fileobj=raw) as source, \
                atomic_open(staging / name, "wb") as out:  # fmt: skip
            shutil.copyfileobj(source, out, 1 << 20)
    except (gzip.BadGzipFile, EOFError, zlib.error, OSError) as exc:
        if isinstance(exc, UsageError):
            raise
        raise ArchiveError(f"archive {archive} cannot be read ({_why(exc)}); delete it and download it again") from None


# ----------------------------------------------------------------------------- into place
def _move_into(source: Path, target: Path, archive: Path) -> None:
    """Put the staged ``source`` at ``target``: a new name is renamed in one step; an existing real
    folder (an earlier, interrupted extraction) is merged into, file by file, replacing the
    archive's files; a link or a file where the archive has a folder is refused."""
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        os.rename(source, target)
        return
    if stat.S_ISDIR(os.lstat(source).st_mode):
        if not stat.S_ISDIR(info.st_mode):  # a link (even to a folder) or a file: not ours to write through
            what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder"
            raise UnsafePathError(f"{target} is {what}, where archive {archive.name} puts a folder; move it away "
                                  "and run again")  # fmt: skip
        for entry in sorted(os.listdir(source)):
            _move_into(source / entry, target / entry, archive)
        return
    if stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(f"{target} is a folder, where archive {archive.name} puts a file; move it away and "
                              "run again")  # fmt: skip
    os.replace(source, target)  # a file or a link at the name is replaced, never written through


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
