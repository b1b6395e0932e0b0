"""Folders reached by descriptor: the flags every open uses, and the walk down a relative name one
component at a time from a folder's descriptor.

The writer makes its folders this way and the marker check finds the files it lists this way:
every folder is opened ``O_DIRECTORY|O_NOFOLLOW`` relative to the one above it, so nothing on the
way can be a link and the length of the whole path never matters (no ``PATH_MAX``, no
``realpath``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
FOLDER_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
"""A folder below the destination: never through a link."""
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
"""A file the extraction writes: new, never an existing file or link."""
READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC
"""A file read back (the marker, a listed file): not a link, and a FIFO does not block."""


@contextlib.contextmanager
def opened_folder(path: Path) -> Iterator[int]:
    """A descriptor of the folder ``path`` (the folder the user named: it may be a link)."""
    fd = os.open(path, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def open_folders(start: int, parts: Sequence[str], *, create: bool = False) -> int:
    """A new descriptor of the folder ``parts`` below the folder descriptor ``start``, each part
    opened in turn without following a link (and first made, when ``create``). An ``OSError``
    names the part it stopped at in its ``filename``."""
    current = os.dup(start)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=current)
            inner = os.open(part, FOLDER_FLAGS, dir_fd=current)
            os.close(current)
            current = inner
    except BaseException:
        os.close(current)
        raise
    return current
