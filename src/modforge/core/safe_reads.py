"""Opening a file modforge is given to *read* (a score file, a protocol, a manifest, a picture, a config):
only a regular file of at most so many bytes, checked before anything is read, never a read that blocks
on a FIFO; each refusal is one error naming the file."""

from __future__ import annotations

import dataclasses
import errno
import io
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import IO, BinaryIO, Literal

from .errors import UsageError
from .safe_open import _BINARY, _CLOEXEC, _NONBLOCK
from .text_safety import plain_text

__all__ = [
    "BOUNDED_READ_WORDS",
    "MAX_TEXT_TABLE_BYTES",
    "Refusal",
    "data_lines",
    "file_kind",
    "open_bounded_file",
    "open_text_table",
    "read_bounded_file",
]

MAX_TEXT_TABLE_BYTES = 1 << 30
"""Largest score file, protocol or manifest read (1 GiB: ten times the largest real one, ASVspoof 2021 DF's
~100 MB trial metadata)."""


def file_kind(mode: int) -> str:
    """What a file of ``os.stat`` mode ``mode`` is, in words, for a message refusing one that is not a
    regular file ("a named pipe (FIFO)", "a folder"...)."""
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why :func:`open_bounded_file` refused a file: :meth:`message` words it from templates, or a caller's
    ``refuse`` makes its own error from it (a config file's errors carry their own location).

    Attributes:
        reason: ``"missing"`` (no such file, or a folder on the way is not one), ``"loop"`` (links that loop),
            ``"unreadable"`` (any other system error), ``"not regular"`` (a folder, FIFO, socket, device) or
            ``"too large"``.
        detail: the system's words for ``missing``, ``loop`` and ``unreadable``.
        mode: the ``st_mode`` of a file that is ``not regular`` (:attr:`kind` says it in words).
        size: the size of a file ``too large``; ``None`` when it grew past the limit while it was read.
    """

    reason: Literal["missing", "loop", "unreadable", "not regular", "too large"]
    detail: str = ""
    mode: int = 0
    size: int | None = None

    @property
    def kind(self) -> str:
        """:func:`file_kind` of :attr:`mode`."""
        return file_kind(self.mode)

    def message(self, words: Mapping[str, str], *, what: str, shown: str, max_bytes: int) -> str:
        """The refusal in ``words`` (as :data:`BOUNDED_READ_WORDS`: a template per reason, ``"grew"`` for a
        file that grew past the limit while read; a loop is worded as ``"unreadable"``)."""
        key = self.reason
        if key == "loop":
            key = "unreadable"
        elif key == "too large" and self.size is None:
            key = "grew"
        return words[key].format(what=what, shown=shown, kind=self.kind, size=self.size, max_bytes=max_bytes,
                                 detail=self.detail)  # fmt: skip


Refuse = Callable[[Refusal], BaseException]
"""Makes the error to raise for a :class:`Refusal` (it names the file)."""

BOUNDED_READ_WORDS: Mapping[str, str] = MappingProxyType({
    "missing": "{what} not found: {shown}",
    "not regular": "the {what} {shown} is {kind}; expected a regular file",
    "too large": "the {what} {shown} is {size} bytes, more than the {max_bytes} a {what} may have",
    "grew": "the {what} {shown} grew past the {max_bytes} bytes a {what} may have while it was read",
    "unreadable": "cannot read the {what} {shown} ({detail})",
})  # fmt: skip
"""How :func:`open_bounded_file` words a refusal by default: a template per reason, with the fields ``what``,
``shown`` (the file), ``kind`` (:func:`file_kind`), ``size``, ``max_bytes`` and ``detail`` (the system's words)."""


def _os_refusal(exc: OSError) -> Refusal:
    detail = exc.strerror or str(exc)
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return Refusal("missing", detail)
    return Refusal("loop" if exc.errno == errno.ELOOP else "unreadable", detail)


def _checked(info: os.stat_result, max_bytes: int) -> Refusal | None:
    if not stat.S_ISREG(info.st_mode):
        return Refusal("not regular", mode=info.st_mode)
    if info.st_size > max_bytes:
        return Refusal("too large", size=info.st_size)
    return None


def _worded(path: str | os.PathLike, what: str, max_bytes: int, error: Callable[[str], BaseException],
            words: Mapping[str, str]) -> Refuse:  # fmt: skip
    """``error(message)`` for a refusal, the message in ``words``, naming ``what`` and the file (its name with
    control characters replaced)."""
    shown = plain_text(os.fspath(path))
    return lambda refusal: error(refusal.message(words, what=what, shown=shown, max_bytes=max_bytes))


def open_bounded_file(
    path: str | os.PathLike,
    *,
    what: str,
    max_bytes: int = MAX_TEXT_TABLE_BYTES,
    error: Callable[[str], BaseException] = UsageError,
    words: Mapping[str, str] = BOUNDED_READ_WORDS,
    refuse: Refuse | None = None,
) -> BinaryIO:
    """``path`` opened to read (binary), once it is known to be a regular file of at most ``max_bytes`` bytes.

    ``path`` is the file the user (or a dataset) names, so it may be a link. It is looked at (``stat``) before
    it is opened — a folder, FIFO, socket or device is refused without being opened (opening some devices
    does something) — then opened non-blocking (a FIFO swapped in meanwhile cannot hang the run) and
    checked again on the open descriptor (``fstat``), so what is read is what was checked. The caller closes
    the handle; a file that grows while it is read is the caller's to bound (:func:`read_bounded_file` does).

    Args:
        path: the file.
        what: what the file is, for the message (``"score file"``, ``"manifest"``).
        max_bytes: the largest size accepted.
        error: the exception class (or any callable taking the message) raised.
        words: the messages, a template per reason (:data:`BOUNDED_READ_WORDS`).
        refuse: makes the error itself instead (``error`` and ``words`` unused): called with the
            :class:`Refusal`, it returns what to raise.

    Raises:
        ``error`` (:class:`~modforge.core.errors.UsageError` by default), naming ``what`` and the file —
        missing, unreadable, a link loop, not a regular file, larger than ``max_bytes`` — or what ``refuse`` made.
    """
    word = refuse or _worded(path, what, max_bytes, error, words)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise word(_os_refusal(exc)) from None
    problem = _checked(info, max_bytes)
    if problem is not None:
        raise word(problem)
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC | _BINARY)
    except OSError as exc:
        raise word(_os_refusal(exc)) from None
    try:
        problem = _checked(os.fstat(fd), max_bytes)
        if problem is not None:
            raise word(problem)
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb")  # noqa: SIM115 - the caller closes it


def read_bounded_file(
    path: str | os.PathLike,
    *,
    what: str,
    max_bytes: int,
    error: Callable[[str], BaseException] = UsageError,
    words: Mapping[str, str] = BOUNDED_READ_WORDS,
    refuse: Refuse | None = None,
) -> bytes:
    """The whole content of ``path``, opened through :func:`open_bounded_file` and read to at most
    ``max_bytes`` bytes (a file that grows past that while it is read is refused too, never read on).

    Raises:
        as :func:`open_bounded_file`; a read error is an ``"unreadable"`` refusal.
    """
    word = refuse or _worded(path, what, max_bytes, error, words)
    with open_bounded_file(path, what=what, max_bytes=max_bytes, refuse=word) as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise word(_os_refusal(exc)) from None
    if len(data) > max_bytes:
        raise word(Refusal("too large"))
    return data


def open_text_table(
    path: str | os.PathLike,
    *,
    what: str,
    max_bytes: int = MAX_TEXT_TABLE_BYTES,
    encoding: str = "utf-8",
    errors: str = "replace",
    newline: str | None = None,
    error: Callable[[str], BaseException] = UsageError,
) -> IO[str]:
    """:func:`open_bounded_file` as text (a score file, a protocol: read line by line). The caller closes it.

    Raises:
        ``error``: see :func:`open_bounded_file`.
    """
    binary = open_bounded_file(path, what=what, max_bytes=max_bytes, error=error)
    return io.TextIOWrapper(binary, encoding=encoding, errors=errors, newline=newline)


def data_lines(
    path: str | os.PathLike,
    *,
    what: str,
    max_bytes: int = MAX_TEXT_TABLE_BYTES,
    error: Callable[[str], BaseException] = UsageError,
) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of each line of a whitespace-separated text table (a score file, a protocol)
    that is neither blank nor a ``#`` comment, read through :func:`open_text_table` (a regular file of at most
    ``max_bytes`` bytes; UTF-8, undecodable bytes replaced).

    Raises:
        ``error``: see :func:`open_bounded_file` (on the first ``next``).
    """
    with open_text_table(path, what=what, max_bytes=max_bytes, error=error) as handle:
        for number, line in enumerate(handle, 1):
            text = line.lstrip()
            if text and not text.startswith("#"):
                yield number, line
