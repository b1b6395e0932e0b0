"""Opening an *existing* name in a folder modforge does not fully trust: with ``O_NOFOLLOW`` (never
through a link), non-blocking where a FIFO could hang the open, and checked on the descriptor to be one
plain regular file."""

from __future__ import annotations

import os
import stat

from .safe_paths import UnsafePathError, _shown

__all__ = ["open_append", "open_lock", "open_regular"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _check_plain_file(fd: int, path: str | os.PathLike, single_link: bool) -> None:
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif single_link and info.st_nlink > 1:
        problem = f"has {info.st_nlink} hard links (another name of some other file)"
    if problem:
        os.close(fd)
        raise UnsafePathError(f"{_shown(path)} {problem}; modforge does not write through it")


def _open_nofollow(path: str | os.PathLike, flags: int, perm: int = 0o644) -> int:
    try:
        return os.open(path, flags | _NOFOLLOW | _CLOEXEC | _BINARY, perm)
    except OSError:
        if os.path.islink(path):
            raise UnsafePathError(f"{_shown(path)} is a symbolic link; modforge does not follow links "
                                  "in folders it writes or reads (remove the link)") from None  # fmt: skip
        raise


def open_append(path: str | os.PathLike, *, encoding: str = "utf-8", newline: str | None = None, binary: bool = False):
    """Open ``path`` to append (created if missing), never through a link and only when it is
    one plain regular file (a hard link to someone's file would be changed in place)."""
    try:  # non-blocking: a FIFO planted at the name cannot hang the open (no reader: an error)
        fd = _open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NONBLOCK)
    except OSError as exc:
        raise UnsafePathError(f"{_shown(path)} cannot be opened to append ({exc.strerror or exc}); "
                              "modforge appends only to plain files it made") from None  # fmt: skip
    _check_plain_file(fd, path, single_link=True)
    if _NONBLOCK:
        os.set_blocking(fd, True)
    if binary:
        return open(fd, "ab")
    return open(fd, "a", encoding=encoding, newline=newline)


def open_lock(path: str | os.PathLike) -> int:
    """A descriptor on the lock file ``path`` (created if missing, never truncated, never a link;
    nothing is written to it, so a hard link — a ``cp -al`` backup — does no harm)."""
    fd = _open_nofollow(path, os.O_RDWR | os.O_CREAT)
    _check_plain_file(fd, path, single_link=False)
    return fd


def open_regular(path: str | os.PathLike, mode: str = "rb", *, encoding: str | None = None):
    """Open an existing regular file to read, never through a link, never a FIFO or device
    (opened non-blocking, so a FIFO cannot hang the read)."""
    if mode not in ("r", "rb"):
        raise ValueError(f"open_regular reads only ('r' or 'rb'), not {mode!r}")
    fd = _open_nofollow(path, os.O_RDONLY | _NONBLOCK)
    _check_plain_file(fd, path, single_link=False)
    if _NONBLOCK:
        os.set_blocking(fd, True)
    if mode == "rb":
        return open(fd, "rb")
    return open(fd, encoding=encoding or "utf-8")
