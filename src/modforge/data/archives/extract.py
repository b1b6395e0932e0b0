"""The entry point: :func:`extract_archive` ties the parts together, and :func:`archive_kind` says
from an archive's name how it is read.

In order: the archive is opened as a plain file and its SHA-256 taken; when the marker of an
earlier extraction of this very archive holds (:mod:`.marker`) nothing more is done; otherwise its
members are read and checked (:mod:`.members`), written into a temporary folder
(:mod:`.writing`), moved into place (:mod:`.staging`), and the marker is written last.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...core.safe_files import ensure_folder, open_regular
from .errors import ArchiveError
from .folders import opened_folder
from .limits import DEFAULT_MAX_MEMBERS, DEFAULT_MAX_TOTAL_BYTES, Limits
from .marker import finished, stream_sha256, write_marker
from .staging import extract_staged

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip", ".gz")


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
    limits = Limits.checked(max_total_bytes, max_member_bytes, max_members)
    try:
        source = open_regular(archive, "rb")
    except FileNotFoundError:
        raise ArchiveError(f"{archive}: no such file") from None
    with source:
        checksum = stream_sha256(source)
        source.seek(0)
        ensure_folder(into, named=True)
        with opened_folder(into) as root:
            done = finished(root, archive, checksum, into)
            if done is not None:
                return [into / name for name in done]
            tops, files = extract_staged(kind, source, archive, root, into, limits)
    write_marker(archive, into, checksum, tops, files)
    return [into / name for name in tops]
