"""Unpacking a downloaded archive into a folder: plain files and folders only, bounded, all-or-nothing.

:func:`extract_archive` handles ``.tar``, ``.tar.gz``/``.tgz`` (also ``.tar.bz2``/``.tar.xz``),
``.zip`` and a single-file ``.gz``. It never calls ``tarfile``'s or ``zipfile``'s own
extraction (``tarfile``'s ``data`` filter judges links with ``os.path.realpath``, which gives up
on paths longer than ``PATH_MAX``: a chain of symbolic links then leads a later member out of the
folder — the CVE-2025-4517 class). Instead modforge writes every member itself:

- only regular files and folders are written; a symbolic or hard link, a device, a FIFO, a
  sparse or unknown member is refused, as is an absolute name, a ``..``, a name written twice
  and a name longer than :data:`MAX_NAME_CHARS` or deeper than :data:`MAX_DEPTH`;
- each name is walked one component at a time from a descriptor of the destination folder,
  every folder opened ``O_DIRECTORY|O_NOFOLLOW`` and every file created ``O_EXCL|O_NOFOLLOW``
  relative to its folder's descriptor — nothing on the way can be a link, and the length of
  the whole path never matters;
- the bytes actually unpacked are counted while they stream: a member past ``max_member_bytes``,
  an archive past ``max_total_bytes`` or past ``max_members`` members is refused at that point,
  whatever its headers claim.

A refused archive is one :class:`UnsafeArchiveError` naming the archive and the member; a
damaged one is one :class:`ArchiveError`. Members go into a fresh temporary folder inside the
target and are moved into place only when all of them are out. A marker
``.modforge-extracted-<archive name>`` is written last; it records the archive's SHA-256 and,
for every file written, its relative name, size and SHA-256, with one SHA-256 over that list.
A re-run believes the marker only after checking every listed file against it: a file altered,
missing or replaced by a link since means the archive is extracted again, never that the
extraction is trusted.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import hashlib
import json
import logging
import lzma
import os
import secrets
import shutil
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..core.errors import UsageError
from ..core.safe_files import UnsafePathError, ensure_folder, open_regular, write_atomic

__all__ = [
    "ARCHIVE_SUFFIXES",
    "DEFAULT_MAX_MEMBERS",
    "DEFAULT_MAX_TOTAL_BYTES",
    "ArchiveError",
    "UnsafeArchiveError",
    "archive_kind",
    "extract_archive",
    "marker_path",
]

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip", ".gz")
MARKER_PREFIX = ".modforge-extracted-"
STAGING_PREFIX = ".modforge-extracting-"

DEFAULT_MAX_TOTAL_BYTES = 1 << 30
"""Unpacked bytes an archive may hold when the caller does not know better (1 GiB); the catalog
passes each archive's own bound."""
DEFAULT_MAX_MEMBERS = 10_000
"""Members (files and folders) an archive may hold when the caller does not know better."""
MAX_NAME_CHARS = 1024
"""Longest member name accepted; no dataset needs more, and a longer one only serves to outgrow ``PATH_MAX``."""
MAX_DEPTH = 32
"""Most folders a member name may go down."""
MAX_MARKER_BYTES = 64 << 20
"""A marker larger than this is not read (Tiny-ImageNet's, with 120 000 files, is about 15 MB)."""

MAX_TAR_READ = 8 << 20
"""Largest single read ``tarfile`` may ask for: a member's data is read 1 MiB at a time, and a
long-name or pax header is far smaller; more is a header bomb."""
TAR_OVERHEAD_PER_MEMBER = 4096
"""Header and padding bytes a tar may spend per member, on top of the members' own bytes."""
ZIP_DIRECTORY_BYTES_PER_MEMBER = 4096
"""Central-directory bytes a zip may spend per member (a name of at most 1024 characters, extras)."""

CHUNK = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_FOLDER_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC

_log = logging.getLogger(__name__)


class ArchiveError(UsageError):
    """An archive that cannot be read (damaged, truncated, encrypted, not the kind its name says)."""


class UnsafeArchiveError(UnsafePathError):
    """An archive refused whole: a member that would land outside the folder, a link, device or
    FIFO, or more bytes or members than allowed; nothing of the archive was put in place."""


@dataclass(frozen=True)
class _Limits:
    total_bytes: int
    member_bytes: int
    members: int


@dataclass(frozen=True)
class _Written:
    """One file the extraction wrote: its relative name (``/``-separated), size and SHA-256."""

    name: str
    size: int
    sha256: str


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
    """The file that says ``archive`` was extracted completely into ``into`` (and what it wrote)."""
    return Path(into) / f"{MARKER_PREFIX}{Path(archive).name}"


def extract_archive(
    archive: str | os.PathLike,
    into: str | os.PathLike,
    *,
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
    max_member_bytes: int | None = None,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> list[Path]:
    """Unpack ``archive`` into the folder ``into`` (created); return the top-level paths it made there.

    Nothing is done when the marker of an earlier extraction of this very archive is there and
    every file it lists is still as it was written; otherwise the archive is extracted (again).

    Args:
        archive: a ``.tar[.gz|.bz2|.xz]``, ``.tgz``, ``.zip`` or single-file ``.gz``.
        into: the folder to unpack into (created; it may be a link the user named).
        max_total_bytes: most bytes all members together may unpack to.
        max_member_bytes: most bytes one member may unpack to (default: ``max_total_bytes``).
        max_members: most members (files and folders) the archive may hold.

    Raises:
        UnsafeArchiveError: a link, device or FIFO, a name leaving ``into`` or written twice, or
            an archive past a limit; names the archive and the member. Nothing was put in place.
        ArchiveError: the archive is missing, damaged or not what its name says.
    """
    archive, into = Path(archive), Path(into)
    kind = archive_kind(archive)
    limits = _limits(max_total_bytes, max_member_bytes, max_members)
    try:
        source = open_regular(archive, "rb")
    except FileNotFoundError:
        raise ArchiveError(f"{archive}: no such file") from None
    with source:
        checksum = _stream_sha256(source)
        source.seek(0)
        ensure_folder(into, named=True)
        with _opened_folder(into) as root:
            done = _finished(root, archive, checksum, into)
            if done is not None:
                return [into / name for name in done]
            tops, files = _extract_staged(kind, source, archive, root, into, limits)
    record = {"archive": archive.name, "sha256": checksum, "entries": tops, "content_sha256": _content_digest(files),
              "files": [[f.name, f.size, f.sha256] for f in files]}  # fmt: skip
    write_atomic(marker_path(archive, into), json.dumps(record, separators=(",", ":")) + "\n")
    return [into / name for name in tops]


def _limits(total: int, member: int | None, members: int) -> _Limits:
    checked = []
    for name, value in (("max_total_bytes", total), ("max_member_bytes", total if member is None else member),
                        ("max_members", members)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageError(f"extract_archive: {name} must be a whole number >= 0, not {value!r}")
        checked.append(value)
    return _Limits(checked[0], min(checked[1], checked[0]), checked[2])


def _stream_sha256(handle: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while block := handle.read(CHUNK):
        digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _opened_folder(path: Path) -> Iterator[int]:
    """A descriptor of the folder ``path`` (the folder the user named: it may be a link)."""
    fd = os.open(path, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- staging and moving
def _extract_staged(kind: str, source: IO[bytes], archive: Path, root: int, into: Path,
                    limits: _Limits) -> tuple[list[str], list[_Written]]:  # fmt: skip
    """Unpack into a fresh temporary folder in ``into``, then move what it holds into place."""
    _remove_stale_staging(root, archive)
    staging_name = _make_staging(root, archive)
    try:
        staging = os.open(staging_name, _FOLDER_FLAGS, dir_fd=root)
        try:
            writer = _Writer(archive, staging, limits)
            try:
                {"tar": _unpack_tar, "zip": _unpack_zip, "gz": _unpack_gz}[kind](source, archive, writer)
            finally:
                writer.close()
            tops = sorted(os.listdir(staging))
            for name in tops:
                _move_into(staging, root, name, archive, into)
        finally:
            os.close(staging)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging_name, dir_fd=root)
    return tops, sorted(writer.files, key=lambda f: f.name)


def _make_staging(root: int, archive: Path) -> str:
    while True:
        name = f"{STAGING_PREFIX}{archive.name}.{secrets.token_hex(6)}"
        try:
            os.mkdir(name, 0o700, dir_fd=root)
            return name
        except FileExistsError:
            continue


def _remove_stale_staging(root: int, archive: Path) -> None:
    """Temporary folders an interrupted extraction of this archive left behind (real folders
    only: a link planted under such a name is left alone, never followed)."""
    prefix = f"{STAGING_PREFIX}{archive.name}."
    with os.scandir(root) as entries:
        stale = [e.name for e in entries if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
    for name in stale:
        with contextlib.suppress(OSError):
            shutil.rmtree(name, dir_fd=root)


def _move_into(source: int, target: int, name: str, archive: Path, shown: Path) -> None:
    """Put the staged ``name`` (in folder descriptor ``source``) at ``name`` in ``target``: a new
    name is renamed in one step; an existing real folder (an earlier, interrupted extraction) is
    merged into, entry by entry, replacing the archive's files; a link or a file where the
    archive has a folder is refused."""
    try:
        there = os.stat(name, dir_fd=target, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(name, name, src_dir_fd=source, dst_dir_fd=target)
        return
    ours = os.stat(name, dir_fd=source, follow_symlinks=False)
    if stat.S_ISDIR(ours.st_mode):
        if not stat.S_ISDIR(there.st_mode):  # a link (even to a folder) or a file: not ours to write through
            what = "a symbolic link" if stat.S_ISLNK(there.st_mode) else "not a folder"
            raise UnsafePathError(f"{shown / name} is {what}, where archive {archive.name} puts a folder; move it "
                                  "away and run again")  # fmt: skip
        inner_source = os.open(name, _FOLDER_FLAGS, dir_fd=source)
        try:
            inner_target = os.open(name, _FOLDER_FLAGS, dir_fd=target)
            try:
                for entry in sorted(os.listdir(inner_source)):
                    _move_into(inner_source, inner_target, entry, archive, shown / name)
            finally:
                os.close(inner_target)
        finally:
            os.close(inner_source)
        return
    if stat.S_ISDIR(there.st_mode):
        raise UnsafePathError(f"{shown / name} is a folder, where archive {archive.name} puts a file; move it away "
                              "and run again")  # fmt: skip
    os.replace(name, name, src_dir_fd=source, dst_dir_fd=target)  # a file or link there is replaced, not followed


# ----------------------------------------------------------------------------- names
def _refuse(archive: Path, member: str, problem: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(f"archive {archive}: member {_shown_name(member)} {problem}; refused, nothing of the "
                              "archive was extracted")  # fmt: skip


def _shown_name(name: str) -> str:
    return repr(name if len(name) <= 200 else name[:200] + "...")


def _name_problem(name: object) -> str | None:
    """Why ``name`` cannot be written below the destination, or ``None``."""
    if not isinstance(name, str) or not name.strip("/"):
        return "has an empty name"
    if "\x00" in name or "\\" in name:
        return "has a NUL or backslash in its name"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "has an absolute name"
    if len(name) > MAX_NAME_CHARS:
        return f"has a name longer than {MAX_NAME_CHARS} characters"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return "leads outside the folder (a '..' in its name)"
    if len(parts) > MAX_DEPTH:
        return f"lies more than {MAX_DEPTH} folders deep"
    if any(len(os.fsencode(p)) > 255 for p in parts):
        return "has a name part longer than 255 bytes"
    if parts and parts[0].startswith((MARKER_PREFIX, STAGING_PREFIX)):
        return "uses a name modforge keeps for its own files"
    return None


def _parts(archive: Path, name: str) -> tuple[str, ...]:
    """The components of a member's name (``.`` and empty ones dropped); refused when unsafe."""
    problem = _name_problem(name)
    if problem:
        raise _refuse(archive, str(name), problem)
    return tuple(p for p in name.split("/") if p not in ("", "."))


# ----------------------------------------------------------------------------- writing members
class _Writer:
    """Writes members below the staging folder's descriptor, counting members and bytes."""

    def __init__(self, archive: Path, staging: int, limits: _Limits):
        self.archive, self.staging, self.limits = archive, staging, limits
        self.members = 0
        self.total = 0
        self.files: list[_Written] = []
        self._cached: tuple[tuple[str, ...], int] | None = None  # the last folder written into

    def close(self) -> None:
        if self._cached is not None:
            os.close(self._cached[1])
            self._cached = None

    def count(self, name: str) -> None:
        """One more member; refused past the member limit."""
        self.members += 1
        if self.members > self.limits.members:
            raise _refuse(self.archive, name, f"is more than the {self.limits.members} members allowed")

    def folder(self, name: str) -> None:
        parts = _parts(self.archive, name)
        if parts:
            os.close(self._walk(parts, name))

    def file(self, name: str, source: IO[bytes], declared: int | None) -> None:
        """Write ``source`` at ``name``: created ``O_EXCL|O_NOFOLLOW`` in its folder, bytes counted as they come."""
        parts = _parts(self.archive, name)
        if not parts:
            raise _refuse(self.archive, name, "has an empty name")
        allowed = min(self.limits.member_bytes, self.limits.total_bytes - self.total)
        if declared is not None and declared > allowed:
            raise self._too_large(name, declared)
        parent = self._parent(parts[:-1], name)
        try:
            fd = os.open(parts[-1], _NEW_FILE_FLAGS, 0o644, dir_fd=parent)
        except FileExistsError:
            folder = stat.S_ISDIR(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode)
            raise _refuse(self.archive, name, "is both a file and a folder in the archive" if folder
                          else "appears twice in the archive") from None  # fmt: skip
        with open(fd, "wb", buffering=0) as out:
            size, digest = _copy_bounded(source, out, allowed, lambda got: self._too_large(name, got))
        self.total += size
        self.files.append(_Written("/".join(parts), size, digest))

    def _too_large(self, name: str, size: int) -> UnsafeArchiveError:
        """The refusal naming whichever bound ``size`` ran into: the member's own, or the archive's."""
        if self.limits.member_bytes < self.limits.total_bytes - self.total:
            return _refuse(self.archive, name, f"unpacks to more than the {self.limits.member_bytes} bytes one "
                                               "member may have")  # fmt: skip
        return _refuse(self.archive, name, f"takes the archive past the {self.limits.total_bytes} bytes it may "
                                           "unpack to")  # fmt: skip

    def _parent(self, parts: tuple[str, ...], name: str) -> int:
        """The descriptor of the folder ``parts`` (created), kept for the next member in the same folder."""
        if self._cached is not None and self._cached[0] == parts:
            return self._cached[1]
        fd = self._walk(parts, name) if parts else os.dup(self.staging)
        self.close()
        self._cached = (parts, fd)
        return fd

    def _walk(self, parts: tuple[str, ...], name: str) -> int:
        """Make and open each folder of ``parts`` in turn from the staging folder, never through a link."""
        current = os.dup(self.staging)
        try:
            for part in parts:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=current)
                try:
                    inner = os.open(part, _FOLDER_FLAGS, dir_fd=current)
                except OSError as exc:
                    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                        raise _refuse(self.archive, name, f"puts a folder where the archive has the file {part!r}") \
                            from None  # fmt: skip
                    raise
                os.close(current)
                current = inner
        except BaseException:
            os.close(current)
            raise
        return current


def _copy_bounded(source: IO[bytes], out: IO[bytes], allowed: int, too_large) -> tuple[int, str]:  # noqa: ANN001
    """Copy ``source`` to ``out`` reading at most ``allowed + 1`` bytes; ``too_large(size)`` is
    raised as soon as more than ``allowed`` came. Returns (size, SHA-256)."""
    digest = hashlib.sha256()
    size = 0
    while True:
        block = source.read(min(CHUNK, allowed - size + 1))
        if not block:
            return size, digest.hexdigest()
        size += len(block)
        if size > allowed:
            raise too_large(size)
        digest.update(block)
        _write_all(out, block)


def _write_all(out: IO[bytes], block: bytes) -> None:
    view = memoryview(block)
    while view:
        view = view[out.write(view) :]


# ----------------------------------------------------------------------------- the three kinds
_READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, lzma.LZMAError,
                NotImplementedError, ValueError, struct.error, OSError)  # fmt: skip


@contextlib.contextmanager
def _reading(archive: Path) -> Iterator[None]:
    """Turn a library's complaint about the archive into one :class:`ArchiveError`; modforge's
    own refusals pass through, and a failed write (a full disk) says so."""
    try:
        yield
    except UsageError:
        raise
    except _READ_ERRORS as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS):
            raise UsageError(f"cannot unpack archive {archive}: {exc.strerror or exc}") from None
        raise ArchiveError(f"archive {archive} cannot be read ({_why(exc)}); delete it and download it again") \
            from None  # fmt: skip


def _unpack_tar(source: IO[bytes], archive: Path, writer: _Writer) -> None:
    """Read the tar once, front to back, member by member: each one checked, then written (or
    refused) in turn; the decompressed stream itself is bounded (:class:`_BoundedStream`)."""
    limits = writer.limits
    budget = limits.total_bytes + TAR_OVERHEAD_PER_MEMBER * (limits.members + 2) + MAX_TAR_READ
    with _reading(archive), _decompressed(source) as plain:
        with tarfile.TarFile(fileobj=_BoundedStream(plain, budget, archive), mode="r") as tar:
            for member in tar:
                writer.count(member.name)
                _check_tar_type(archive, member)
                if member.isdir():
                    writer.folder(member.name)
                    continue
                data = tar.extractfile(member)
                if data is None:
                    raise _refuse(archive, member.name, "has no data")
                with data:
                    writer.file(member.name, data, member.size)


@contextlib.contextmanager
def _decompressed(source: IO[bytes]) -> Iterator[IO[bytes]]:
    """``source`` decompressed according to its first bytes (gzip, bzip2, xz, or none)."""
    head = source.read(6)
    source.seek(0)
    if head.startswith(b"\x1f\x8b"):
        opened: IO[bytes] = gzip.GzipFile(fileobj=source, mode="rb")
    elif head.startswith(b"BZh"):
        opened = bz2.BZ2File(source, "rb")
    elif head.startswith(b"\xfd7zXZ\x00"):
        opened = lzma.LZMAFile(source, "rb")
    else:
        yield source
        return
    with opened:
        yield opened


class _BoundedStream:
    """A forward-only view of a tar's decompressed bytes for ``tarfile``: more than ``limit``
    bytes in all (a bomb), one read larger than :data:`MAX_TAR_READ` (a header claiming
    gigabytes of names, which ``tarfile`` would read into memory) or a seek backward is refused
    while reading, whatever the headers say."""

    def __init__(self, inner: IO[bytes], limit: int, archive: Path):
        self.inner, self.limit, self.archive = inner, limit, archive
        self.position = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > MAX_TAR_READ:
            raise UnsafeArchiveError(f"archive {self.archive}: a tar header declares {size} bytes of names or "
                                     f"attributes, more than the {MAX_TAR_READ} allowed; refused, nothing of the "
                                     "archive was extracted")  # fmt: skip
        data = self.inner.read(size)
        self.position += len(data)
        if self.position > self.limit:
            raise UnsafeArchiveError(f"archive {self.archive} unpacks to more than the {self.limit} bytes allowed "
                                     "(members and headers together); refused, nothing of the archive was "
                                     "extracted")  # fmt: skip
        return data

    def seek(self, target: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_CUR:
            target += self.position
        elif whence != os.SEEK_SET:
            raise ValueError("only forward seeks from the start or the current position")
        if target < self.position:
            raise ValueError(f"a seek back from byte {self.position} to {target}")
        while self.position < target:
            if not self.read(min(CHUNK, target - self.position)):
                break
        return self.position

    def tell(self) -> int:
        return self.position


def _check_tar_type(archive: Path, member: tarfile.TarInfo) -> None:
    """Only regular files and folders; anything else is refused, named."""
    if member.isdir() or (member.isreg() and not member.issparse()):
        return
    if member.issym():
        raise _refuse(archive, member.name, f"is a symbolic link (to {_shown_name(member.linkname)}); links are "
                                            "not extracted")  # fmt: skip
    if member.islnk():
        raise _refuse(archive, member.name, f"is a hard link (to {_shown_name(member.linkname)}); links are not "
                                            "extracted")  # fmt: skip
    if member.ischr() or member.isblk():
        raise _refuse(archive, member.name, "is a device")
    if member.isfifo():
        raise _refuse(archive, member.name, "is a FIFO")
    if member.issparse():
        raise _refuse(archive, member.name, "is a sparse file")
    raise _refuse(archive, member.name, f"is a special file (tar type {member.type!r})")


def _unpack_zip(source: IO[bytes], archive: Path, writer: _Writer) -> None:
    with _reading(archive):
        _check_zip_directory(source, archive, writer.limits.members)
        with zipfile.ZipFile(source) as zf:
            infos = zf.infolist()
            if len(infos) > writer.limits.members:
                raise _refuse(archive, infos[writer.limits.members].filename,
                              f"is more than the {writer.limits.members} members allowed")  # fmt: skip
            for info in infos:
                writer.count(info.filename)
                _check_zip_type(archive, info)
                if info.is_dir():
                    writer.folder(info.filename)
                    continue
                if info.flag_bits & 0x1:
                    raise ArchiveError(f"archive {archive}: member {_shown_name(info.filename)} is encrypted; "
                                       "modforge does not unpack encrypted archives")  # fmt: skip
                with zf.open(info) as data:
                    writer.file(info.filename, data, info.file_size)


def _check_zip_directory(source: IO[bytes], archive: Path, members: int) -> None:
    """Refuse, before ``zipfile`` reads it, a central directory announcing more than ``members``
    entries or larger than they could need (``zipfile`` holds every entry in memory)."""
    found = _zip_directory(source)
    source.seek(0)
    if found is None:
        return  # no end record: zipfile says what is wrong
    count, size = found
    if count > members or size > ZIP_DIRECTORY_BYTES_PER_MEMBER * members + 65536:
        raise UnsafeArchiveError(f"archive {archive}: its directory lists {count} members in {size} bytes, more "
                                 f"than the {members} members allowed; refused, nothing of the archive was "
                                 "extracted")  # fmt: skip


def _zip_directory(source: IO[bytes]) -> tuple[int, int] | None:
    """(entries, size in bytes) of a zip's central directory from its end record (zip64 too),
    found the way ``zipfile`` finds it: at the very end, else the last signature in the tail."""
    end = source.seek(0, os.SEEK_END)
    start = max(0, end - (22 + 65535))
    source.seek(start)
    tail = source.read()
    at = len(tail) - 22 if tail[-22:-18] == b"PK\x05\x06" else tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        return None
    count = int.from_bytes(tail[at + 10 : at + 12], "little")
    size = int.from_bytes(tail[at + 12 : at + 16], "little")
    locator = tail[at - 20 : at] if at >= 20 else b""
    if locator[:4] == b"PK\x06\x07":  # zip64: the real figures are in the zip64 end record
        source.seek(int.from_bytes(locator[8:16], "little"))
        record = source.read(56)
        if record[:4] == b"PK\x06\x06" and len(record) == 56:
            count = max(count, int.from_bytes(record[32:40], "little"))
            size = max(size, int.from_bytes(record[40:48], "little"))
    return count, size


def _check_zip_type(archive: Path, info: zipfile.ZipInfo) -> None:
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise _refuse(archive, info.filename, "is a symbolic link; links are not extracted")
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise _refuse(archive, info.filename, "is not a regular file or folder (a device, FIFO or socket)")


def _unpack_gz(source: IO[bytes], archive: Path, writer: _Writer) -> None:
    name = archive.name[: -len(".gz")]
    writer.count(name)
    with _reading(archive), gzip.GzipFile(fileobj=source, mode="rb") as data:
        writer.file(name, data, None)


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


# ----------------------------------------------------------------------------- the marker
def _content_digest(files: list[_Written]) -> str:
    """One SHA-256 over the sorted (name, size, SHA-256) of every file written."""
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.name):
        digest.update(os.fsencode(f.name) + b"\0" + str(f.size).encode() + b"\0" + f.sha256.encode() + b"\n")
    return digest.hexdigest()


def _finished(root: int, archive: Path, checksum: str, into: Path) -> list[str] | None:
    """The top-level names of a finished extraction of this very archive whose files are all
    still as written, or ``None`` (no marker, another archive, or something changed since)."""
    record = _read_marker(root, f"{MARKER_PREFIX}{archive.name}")
    if record is None or record.get("sha256") != checksum:
        return None
    entries, files = record.get("entries"), _listed_files(record.get("files"))
    if files is None or record.get("content_sha256") != _content_digest(files):
        return None
    if not isinstance(entries, list) or not all(isinstance(e, str) and _name_problem(e) is None and "/" not in e
                                                for e in entries):  # fmt: skip
        return None
    for name in entries:
        try:
            os.stat(name, dir_fd=root, follow_symlinks=False)
        except OSError:
            return _altered(into / name, archive, "is gone")
    for f in files:
        problem = _file_problem(root, f)
        if problem:
            return _altered(into / f.name, archive, problem)
    return entries


def _altered(path: Path, archive: Path, problem: str) -> None:
    _log.warning("%s %s since archive %s was extracted; extracting it again", path, problem, archive.name)
    return None


def _read_marker(root: int, name: str) -> dict | None:
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=root)
    except OSError:
        return None
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MARKER_BYTES:
            return None
        try:
            record = json.loads(handle.read(MAX_MARKER_BYTES + 1))
        except (OSError, ValueError):
            return None
    return record if isinstance(record, dict) else None


def _listed_files(listed: object) -> list[_Written] | None:
    """The marker's file list, when every entry is a safe name, a size and a SHA-256."""
    if not isinstance(listed, list):
        return None
    files = []
    for entry in listed:
        if not (isinstance(entry, list) and len(entry) == 3):
            return None
        name, size, digest = entry
        if _name_problem(name) is not None or isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return None
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            return None
        files.append(_Written(name, size, digest))
    return files


def _file_problem(root: int, listed: _Written) -> str | None:
    """Why the file ``listed`` is not as the extraction wrote it (walked without following a link), or ``None``."""
    parts = listed.name.split("/")
    current = os.dup(root)
    try:
        for part in parts[:-1]:
            inner = os.open(part, _FOLDER_FLAGS, dir_fd=current)
            os.close(current)
            current = inner
        if not stat.S_ISREG(os.stat(parts[-1], dir_fd=current, follow_symlinks=False).st_mode):
            return "is not a regular file"  # a link, FIFO or device put there: never opened
        fd = os.open(parts[-1], _READ_FLAGS, dir_fd=current)
    except OSError:
        return "is gone or lies behind a link"
    finally:
        os.close(current)
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "is not a regular file"
        if info.st_size != listed.size:
            return f"has {info.st_size} bytes, not {listed.size}"
        if _stream_sha256(handle) != listed.sha256:
            return "was altered"
    return None
