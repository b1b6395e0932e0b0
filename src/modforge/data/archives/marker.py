"""The record of a finished extraction: written last, and believed only after every file it lists
has been checked against it.

The marker ``.modforge-extracted-<archive name>`` holds the archive's SHA-256, the top-level names
it made and, for every file written, its relative name, size and SHA-256, with one SHA-256 over
that list. A re-run skips the extraction only when the archive is the same and every listed file
is still a regular file of that size and digest, reached without following a link (a FIFO or
device put in its place is never opened); anything altered, missing or replaced means the archive
is extracted again, never that the extraction is trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import IO

from ...core.safe_files import write_atomic
from .folders import READ_FLAGS, open_folders
from .limits import CHUNK, MARKER_PREFIX, name_problem
from .writing import Written

MAX_MARKER_BYTES = 64 << 20
"""A marker larger than this is not read (Tiny-ImageNet's, with 120 000 files, is about 15 MB)."""

_log = logging.getLogger("modforge.data.extract")  # the logger's name from before the package: filters keep working


def marker_path(archive: str | os.PathLike, into: str | os.PathLike) -> Path:
    """The file that says ``archive`` was extracted completely into ``into`` (and what it wrote)."""
    return Path(into) / f"{MARKER_PREFIX}{Path(archive).name}"


def stream_sha256(handle: IO[bytes]) -> str:
    """The SHA-256 of what is left to read in ``handle``, read a chunk at a time."""
    digest = hashlib.sha256()
    while block := handle.read(CHUNK):
        digest.update(block)
    return digest.hexdigest()


def write_marker(archive: Path, into: Path, checksum: str, tops: list[str], files: list[Written]) -> None:
    """Record that ``archive`` (SHA-256 ``checksum``) made ``tops`` in ``into`` and wrote ``files``."""
    record = {"archive": archive.name, "sha256": checksum, "entries": tops, "content_sha256": _content_digest(files),
              "files": [[f.name, f.size, f.sha256] for f in files]}  # fmt: skip
    write_atomic(marker_path(archive, into), json.dumps(record, separators=(",", ":")) + "\n")


def finished(root: int, archive: Path, checksum: str, into: Path) -> list[str] | None:
    """The top-level names of a finished extraction of this very archive whose files are all
    still as written, or ``None`` (no marker, another archive, or something changed since)."""
    record = _read_marker(root, f"{MARKER_PREFIX}{archive.name}")
    if record is None or record.get("sha256") != checksum:
        return None
    entries, files = record.get("entries"), _listed_files(record.get("files"))
    if files is None or record.get("content_sha256") != _content_digest(files):
        return None
    if not isinstance(entries, list) or not all(isinstance(e, str) and name_problem(e) is None and "/" not in e
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


def _content_digest(files: list[Written]) -> str:
    """One SHA-256 over the sorted (name, size, SHA-256) of every file written."""
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.name):
        digest.update(os.fsencode(f.name) + b"\0" + str(f.size).encode() + b"\0" + f.sha256.encode() + b"\n")
    return digest.hexdigest()


def _altered(path: Path, archive: Path, problem: str) -> None:
    _log.warning("%s %s since archive %s was extracted; extracting it again", path, problem, archive.name)
    return None


def _read_marker(root: int, name: str) -> dict | None:
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=root)
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


def _listed_files(listed: object) -> list[Written] | None:
    """The marker's file list, when every entry is a safe name, a size and a SHA-256."""
    if not isinstance(listed, list):
        return None
    files = []
    for entry in listed:
        if not (isinstance(entry, list) and len(entry) == 3):
            return None
        name, size, digest = entry
        if name_problem(name) is not None or isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return None
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            return None
        files.append(Written(name, size, digest))
    return files


def _file_problem(root: int, listed: Written) -> str | None:
    """Why the file ``listed`` is not as the extraction wrote it (walked without following a link), or ``None``."""
    parts = listed.name.split("/")
    try:
        folder = open_folders(root, parts[:-1])
    except OSError:
        return "is gone or lies behind a link"
    try:
        if not stat.S_ISREG(os.stat(parts[-1], dir_fd=folder, follow_symlinks=False).st_mode):
            return "is not a regular file"  # a link, FIFO or device put there: never opened
        fd = os.open(parts[-1], READ_FLAGS, dir_fd=folder)
    except OSError:
        return "is gone or lies behind a link"
    finally:
        os.close(folder)
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "is not a regular file"
        if info.st_size != listed.size:
            return f"has {info.st_size} bytes, not {listed.size}"
        if stream_sha256(handle) != listed.sha256:
            return "was altered"
    return None
