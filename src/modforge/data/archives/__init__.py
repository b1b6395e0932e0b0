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

The modules, one job each:

- :mod:`.extract` — the entry point, :func:`extract_archive`, and :func:`archive_kind`;
- :mod:`.limits` — the bounds and the member names accepted;
- :mod:`.members` — reading the members of a tar, zip or gz, counted and of accepted kinds;
- :mod:`.writing` — writing them below a folder descriptor, bytes bounded as they come;
- :mod:`.folders` — the open flags, and walking folders one component at a time;
- :mod:`.staging` — the temporary folder, and moving its contents into place;
- :mod:`.marker` — the record of a finished extraction: written, and checked before it is believed;
- :mod:`.errors` — the two errors and the wording of a refusal.

:mod:`modforge.data.extract` re-exports the public names, as before the package.
"""

from __future__ import annotations

from .errors import ArchiveError, UnsafeArchiveError
from .extract import ARCHIVE_SUFFIXES, archive_kind, extract_archive
from .limits import DEFAULT_MAX_MEMBERS, DEFAULT_MAX_TOTAL_BYTES, MAX_DEPTH, MAX_NAME_CHARS
from .marker import marker_path

__all__ = [
    "ARCHIVE_SUFFIXES",
    "DEFAULT_MAX_MEMBERS",
    "DEFAULT_MAX_TOTAL_BYTES",
    "MAX_DEPTH",
    "MAX_NAME_CHARS",
    "ArchiveError",
    "UnsafeArchiveError",
    "archive_kind",
    "extract_archive",
    "marker_path",
]
