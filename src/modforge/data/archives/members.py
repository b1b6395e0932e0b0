"""Reading the members of a tar, zip or single-file gz: each one counted and checked, then handed
on as a folder or as a file's bytes to stream — never extracted by ``tarfile`` or ``zipfile``.

Only regular files and folders come out; a symbolic or hard link, a device, a FIFO, a sparse or
unknown member is refused, named. The reading itself is bounded before the libraries can be made
to hold much in memory: a tar's decompressed stream by :class:`_BoundedStream` (all its bytes, and
any one read a header asks for), a zip's central directory by its end record, checked before
``zipfile`` loads it. Names and sizes are the writer's to check (:mod:`.writing`), as the bytes
arrive.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .errors import ArchiveError, UnsafeArchiveError, refuse, refused, shown_name
from .limits import CHUNK, Limits

MAX_TAR_READ = 8 << 20
"""Largest single read ``tarfile`` may ask for: a member's data is read 1 MiB at a time, and a
long-name or pax header is far smaller; more is a header bomb."""
TAR_OVERHEAD_PER_MEMBER = 4096
"""Header and padding bytes a tar may spend per member, on top of the members' own bytes."""
ZIP_DIRECTORY_BYTES_PER_MEMBER = 4096
"""Central-directory bytes a zip may spend per member (a name of at most 1024 characters, extras)."""


@dataclass(frozen=True)
class Member:
    """One member, counted and of an accepted kind: a folder (``data`` is ``None``) or a file whose
    bytes are read from ``data`` (valid until the next member) and whose header says ``declared``."""

    name: str
    data: IO[bytes] | None = None
    declared: int | None = None


def members(kind: str, source: IO[bytes], archive: Path, limits: Limits) -> Iterator[Member]:
    """The members of ``source``, a ``kind`` (``"tar"``, ``"zip"``, ``"gz"``) archive, in order."""
    return {"tar": _tar_members, "zip": _zip_members, "gz": _gz_members}[kind](source, archive, limits)


def _too_many(archive: Path, name: str, limits: Limits) -> UnsafeArchiveError:
    return refuse(archive, name, f"is more than the {limits.members} members allowed")


# ----------------------------------------------------------------------------- tar
def _tar_members(source: IO[bytes], archive: Path, limits: Limits) -> Iterator[Member]:
    """Read the tar once, front to back, member by member: each one checked, then handed on (or
    refused) in turn; the decompressed stream itself is bounded (:class:`_BoundedStream`)."""
    budget = limits.total_bytes + TAR_OVERHEAD_PER_MEMBER * (limits.members + 2) + MAX_TAR_READ
    with _decompressed(source) as plain:
        with tarfile.TarFile(fileobj=_BoundedStream(plain, budget, archive), mode="r") as tar:
            for number, member in enumerate(tar, 1):
                if number > limits.members:
                    raise _too_many(archive, member.name, limits)
                _check_tar_type(archive, member)
                if member.isdir():
                    yield Member(member.name)
                    continue
                data = tar.extractfile(member)
                if data is None:
                    raise refuse(archive, member.name, "has no data")
                with data:
                    yield Member(member.name, data, member.size)


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
            raise refused(f"archive {self.archive}: a tar header declares {size} bytes of names or attributes, "
                          f"more than the {MAX_TAR_READ} allowed")  # fmt: skip
        data = self.inner.read(size)
        self.position += len(data)
        if self.position > self.limit:
            raise refused(f"archive {self.archive} unpacks to more than the {self.limit} bytes allowed (members "
                          "and headers together)")  # fmt: skip
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
    if member.issym() or member.islnk():
        link = "symbolic" if member.issym() else "hard"
        raise refuse(archive, member.name, f"is a {link} link (to {shown_name(member.linkname)}); links are not "
                                           "extracted")  # fmt: skip
    if member.ischr() or member.isblk():
        raise refuse(archive, member.name, "is a device")
    if member.isfifo():
        raise refuse(archive, member.name, "is a FIFO")
    if member.issparse():
        raise refuse(archive, member.name, "is a sparse file")
    raise refuse(archive, member.name, f"is a special file (tar type {member.type!r})")


# ----------------------------------------------------------------------------- zip
def _zip_members(source: IO[bytes], archive: Path, limits: Limits) -> Iterator[Member]:
    _check_zip_directory(source, archive, limits.members)
    with zipfile.ZipFile(source) as zf:
        infos = zf.infolist()
        if len(infos) > limits.members:
            raise _too_many(archive, infos[limits.members].filename, limits)
        for info in infos:
            _check_zip_type(archive, info)
            if info.is_dir():
                yield Member(info.filename)
                continue
            if info.flag_bits & 0x1:
                raise ArchiveError(f"archive {archive}: member {shown_name(info.filename)} is encrypted; "
                                   "modforge does not unpack encrypted archives")  # fmt: skip
            with zf.open(info) as data:
                yield Member(info.filename, data, info.file_size)


def _check_zip_directory(source: IO[bytes], archive: Path, members: int) -> None:
    """Refuse, before ``zipfile`` reads it, a central directory announcing more than ``members``
    entries or larger than they could need (``zipfile`` holds every entry in memory)."""
    found = _zip_directory(source)
    source.seek(0)
    if found is None:
        return  # no end record: zipfile says what is wrong
    count, size = found
    if count > members or size > ZIP_DIRECTORY_BYTES_PER_MEMBER * members + 65536:
        raise refused(f"archive {archive}: its directory lists {count} members in {size} bytes, more than the "
                      f"{members} members allowed")  # fmt: skip


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
        raise refuse(archive, info.filename, "is a symbolic link; links are not extracted")
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise refuse(archive, info.filename, "is not a regular file or folder (a device, FIFO or socket)")


# ----------------------------------------------------------------------------- gz
def _gz_members(source: IO[bytes], archive: Path, limits: Limits) -> Iterator[Member]:
    """The one file of a ``.gz``, named after the archive less ``.gz``; its size is not declared."""
    name = archive.name[: -len(".gz")]
    if limits.members < 1:
        raise _too_many(archive, name, limits)
    with gzip.GzipFile(fileobj=source, mode="rb") as data:
        yield Member(name, data)
