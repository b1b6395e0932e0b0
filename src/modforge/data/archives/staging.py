"""All-or-nothing: unpack into a fresh temporary folder inside the destination, and move what it
holds into place only once every member is out.

A refused or damaged archive thus leaves nothing behind (the temporary folder is removed), and a
temporary folder an interrupted run left is removed before the next one. Moving in never writes
through a link: a new name is renamed in one step, an existing real folder is merged into entry by
entry, and a link or a file where the archive has a folder is refused.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import IO

from ...core.safe_files import UnsafePathError
from .errors import reading
from .folders import FOLDER_FLAGS
from .limits import STAGING_PREFIX, Limits
from .members import members
from .writing import Writer, Written


def extract_staged(kind: str, source: IO[bytes], archive: Path, root: int, into: Path,
                   limits: Limits) -> tuple[list[str], list[Written]]:  # fmt: skip
    """Unpack into a fresh temporary folder in ``into`` (descriptor ``root``), then move what it
    holds into place; return the top-level names and the files written, sorted by name."""
    _remove_stale_staging(root, archive)
    staging_name = _make_staging(root, archive)
    try:
        staging = os.open(staging_name, FOLDER_FLAGS, dir_fd=root)
        try:
            writer = Writer(archive, staging, limits)
            try:
                with reading(archive), contextlib.closing(members(kind, source, archive, limits)) as found:
                    for member in found:
                        if member.data is None:
                            writer.folder(member.name)
                        else:
                            writer.file(member.name, member.data, member.declared)
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
        inner_source = os.open(name, FOLDER_FLAGS, dir_fd=source)
        try:
            inner_target = os.open(name, FOLDER_FLAGS, dir_fd=target)
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
