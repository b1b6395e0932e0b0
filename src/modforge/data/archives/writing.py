"""Writing members below a folder descriptor: folders made one component at a time, files created
``O_EXCL|O_NOFOLLOW`` in their folder, and bytes counted while they are copied.

A member's bytes are bounded as they arrive, not by its header: a member past ``member_bytes``
or one that takes the archive past ``total_bytes`` is refused at the byte where it does. A file
created ``O_EXCL`` can neither overwrite a member written before (a name twice, a file and a folder
of one name) nor write through a link; every file written is recorded with its size and SHA-256
for the marker.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .errors import UnsafeArchiveError, refuse
from .folders import NEW_FILE_FLAGS, open_folders
from .limits import CHUNK, Limits, name_problem


@dataclass(frozen=True)
class Written:
    """One file the extraction wrote: its relative name (``/``-separated), size and SHA-256."""

    name: str
    size: int
    sha256: str


class Writer:
    """Writes members below the staging folder's descriptor, counting the bytes they unpack to."""

    def __init__(self, archive: Path, staging: int, limits: Limits):
        self.archive, self.staging, self.limits = archive, staging, limits
        self.total = 0
        self.files: list[Written] = []
        self._cached: tuple[tuple[str, ...], int] | None = None  # the last folder written into

    def close(self) -> None:
        if self._cached is not None:
            os.close(self._cached[1])
            self._cached = None

    def folder(self, name: str) -> None:
        parts = self._parts(name)
        if parts:
            os.close(self._walk(parts, name))

    def file(self, name: str, source: IO[bytes], declared: int | None) -> None:
        """Write ``source`` at ``name``: created ``O_EXCL|O_NOFOLLOW`` in its folder, bytes counted as they come."""
        parts = self._parts(name)
        if not parts:
            raise refuse(self.archive, name, "has an empty name")
        allowed = min(self.limits.member_bytes, self.limits.total_bytes - self.total)
        if declared is not None and declared > allowed:
            raise self._too_large(name, declared)
        parent = self._parent(parts[:-1], name)
        try:
            fd = os.open(parts[-1], NEW_FILE_FLAGS, 0o644, dir_fd=parent)
        except FileExistsError:
            folder = stat.S_ISDIR(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode)
            raise refuse(self.archive, name, "is both a file and a folder in the archive" if folder
                         else "appears twice in the archive") from None  # fmt: skip
        with open(fd, "wb", buffering=0) as out:
            size, digest = copy_bounded(source, out, allowed, lambda got: self._too_large(name, got))
        self.total += size
        self.files.append(Written("/".join(parts), size, digest))

    def _parts(self, name: str) -> tuple[str, ...]:
        """The components of a member's name (``.`` and empty ones dropped); refused when unsafe."""
        problem = name_problem(name)
        if problem:
            raise refuse(self.archive, str(name), problem)
        return tuple(p for p in name.split("/") if p not in ("", "."))

    def _too_large(self, name: str, size: int) -> UnsafeArchiveError:
        """The refusal naming whichever bound ``size`` ran into: the member's own, or the archive's."""
        if self.limits.member_bytes < self.limits.total_bytes - self.total:
            return refuse(self.archive, name, f"unpacks to more than the {self.limits.member_bytes} bytes one "
                                              "member may have")  # fmt: skip
        return refuse(self.archive, name, f"takes the archive past the {self.limits.total_bytes} bytes it may "
                                          "unpack to")  # fmt: skip

    def _parent(self, parts: tuple[str, ...], name: str) -> int:
        """The descriptor of the folder ``parts`` (created), kept for the next member in the same folder."""
        if self._cached is not None and self._cached[0] == parts:
            return self._cached[1]
        fd = self._walk(parts, name)
        self.close()
        self._cached = (parts, fd)
        return fd

    def _walk(self, parts: tuple[str, ...], name: str) -> int:
        """Make and open each folder of ``parts`` in turn from the staging folder, never through a link."""
        try:
            return open_folders(self.staging, parts, create=True)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):  # exc.filename: the part that is a file (or a link)
                raise refuse(self.archive, name, f"puts a folder where the archive has the file {exc.filename!r}") \
                    from None  # fmt: skip
            raise


def copy_bounded(source: IO[bytes], out: IO[bytes], allowed: int,
                 too_large: Callable[[int], BaseException]) -> tuple[int, str]:  # fmt: skip
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
