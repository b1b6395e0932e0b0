"""Folders modforge is asked to reuse or remove: :func:`check_folder` refuses one holding a link that leads
out (or dangles, or loops) or a special file; :func:`remove_tree` deletes only a real folder inside the
folder modforge owns, holding only what modforge wrote."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from .safe_paths import UnsafePathError, _shown

__all__ = ["MAX_FOLDER_ENTRIES", "check_folder", "foreign_entry", "remove_tree"]

MAX_FOLDER_ENTRIES = 500_000
"""More entries than this in a folder to reuse is refused rather than walked for minutes."""


def check_folder(root: str | os.PathLike, what: str = "folder", max_entries: int = MAX_FOLDER_ENTRIES) -> None:
    """Refuse a folder to reuse that holds a link leading outside it (or dangling, or looping)
    or an entry that is neither a regular file nor a folder. Links that stay inside are fine
    (they are not descended into: their targets are checked where they lie).

    ``root`` itself may be a link the user named; it is resolved once.

    Raises:
        UnsafePathError: one line naming the entry and what it is.
    """
    root_path = Path(root)
    try:
        real_root = root_path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise UnsafePathError(f"{what} {_shown(root)} does not exist or is a link that leads nowhere") from None
    if not real_root.is_dir():
        raise UnsafePathError(f"{what} {_shown(root)} is not a folder")
    seen = 0
    pending = [real_root]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:  # removed meanwhile by the run or sweep that owns it
            continue
        except OSError as exc:
            raise UnsafePathError(f"{what} {_shown(root)}: cannot read {_relative(folder, real_root, root_path)} "
                                  f"({exc.strerror or exc})") from None  # fmt: skip
        seen += len(entries)
        if seen > max_entries:
            raise UnsafePathError(f"{what} {_shown(root)} holds more than {max_entries} entries; refused")
        for entry in entries:
            problem = _entry_problem(entry, real_root)
            if problem:
                raise UnsafePathError(f"{what} {_shown(root)}: {_relative(entry.path, real_root, root_path)} "
                                      f"{problem}; nothing was changed (remove it, or copy the folder without it)")  # fmt: skip
            if entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))


def _relative(path: str | os.PathLike, real_root: Path, shown_root: Path) -> str:
    try:
        return str(shown_root / Path(path).relative_to(real_root))
    except ValueError:
        return _shown(path)


def _entry_problem(entry: os.DirEntry, real_root: Path) -> str | None:
    """What is wrong with ``entry`` of a folder to reuse (``None``: nothing, or it is gone —
    another process of the same run or sweep may rename its temporaries meanwhile)."""
    if entry.is_symlink():
        try:
            target = os.readlink(entry.path)
        except FileNotFoundError:
            return None
        try:
            real = Path(entry.path).resolve(strict=True)
        except RuntimeError:
            return f"is a symbolic link that loops ({target})"
        except OSError:
            return f"is a symbolic link to {target}, which does not exist"
        if real != real_root and not real.is_relative_to(real_root):
            return f"is a symbolic link to {real}, outside the folder"
        if not (real.is_file() or real.is_dir()):
            return f"is a symbolic link to {real}, which is neither a regular file nor a folder"
        return None
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")  # fmt: skip
    return f"is {kind}, not a regular file or folder"


# ----------------------------------------------------------------------------- removing
def foreign_entry(path: str | os.PathLike, wrote: Callable[[Path], bool]) -> tuple[Path, str] | None:
    """The first entry under the folder ``path`` that modforge did not write, and what it is: a
    link, a special file, or a regular file for which ``wrote(relative_path)`` is false
    (folders are judged by what they hold); ``None`` when there is none."""
    for current, folders, files in os.walk(path, followlinks=False):
        for name in folders + files:
            full = Path(current) / name
            rel = full.relative_to(path)
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                return rel, "a symbolic link"
            if stat.S_ISREG(mode):
                if not wrote(rel):
                    return rel, "a file modforge did not write"
            elif not stat.S_ISDIR(mode):
                return rel, "a special file (FIFO, socket or device)"
    return None


def remove_tree(path: str | os.PathLike, owner: str | os.PathLike, wrote: Callable[[Path], bool], what: str) -> None:
    """Delete the folder ``path`` — only when ``lstat`` says it is a real folder (not a link)
    lying inside ``owner`` (the folder modforge owns), and every file under it is a regular
    file for which ``wrote(relative_path)`` says modforge wrote it (no link, no special file).

    Raises:
        UnsafePathError: naming the first entry that fails; nothing was removed.
    """
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(f"{what} {_shown(path)} is not a real folder (a link or a file); modforge removes "
                              "only folders it made, nothing was removed")  # fmt: skip
    real_owner = Path(owner).resolve()
    real_parent = path.parent.resolve()
    if not (real_parent == real_owner or real_parent.is_relative_to(real_owner)):
        raise UnsafePathError(f"{what} {_shown(path)} lies outside {_shown(owner)}; nothing was removed")
    found = foreign_entry(path, wrote)
    if found is not None:
        raise UnsafePathError(f"{what} {_shown(path)} holds {found[0]}, {found[1]}; nothing was removed "
                              "(move it away, or choose another folder)")  # fmt: skip
    shutil.rmtree(path)
