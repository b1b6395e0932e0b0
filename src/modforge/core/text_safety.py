"""Strings from data made harmless for where they are shown: a terminal, a markdown page, a CSV cell.

A label, a class name, a title or a CSV value in a folder someone gave you is data. Printed
raw, an escape sequence rewrites the terminal, rich markup (``[/bold]``) crashes the
printer, ``|`` or HTML breaks a results table, and ``=cmd|' /C calc'!A0`` runs in a
spreadsheet. Each function here turns such a string into plain text for one destination.

A line from a data file quoted in an error message is data too: :func:`quoted` shows at most
:data:`MAX_QUOTED` characters of it, so a malformed 5 MB line gives a one-line error, not a 5 MB
one. :func:`open_bounded_file` and :func:`open_text_table` open such a file (a score file, a
protocol) only when it is a regular file of bounded size, checked before anything is read.
"""

from __future__ import annotations

import html
import io
import os
import re
import stat
from collections.abc import Iterator
from typing import IO, Any, BinaryIO

from .errors import UsageError

__all__ = [
    "MAX_QUOTED",
    "MAX_TEXT_TABLE_BYTES",
    "csv_cell",
    "csv_value",
    "data_lines",
    "display_lines",
    "file_kind",
    "markdown_cell",
    "open_bounded_file",
    "open_text_table",
    "plain_text",
    "quoted",
    "terminal_text",
]

MAX_QUOTED = 200
"""Most characters of a line from a data file an error message quotes."""

MAX_TEXT_TABLE_BYTES = 1 << 30
"""Largest score or protocol file read (1 GiB: ten times the largest real one, ASVspoof 2021 DF's ~100 MB
trial metadata)."""

# C0, DEL and C1 control characters, and the Unicode bidi overrides that
# make a string display in another order than it reads
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CSV_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def plain_text(value: Any, replacement: str = "?") -> str:
    """``str(value)`` with every control character (C0, DEL, C1, bidi overrides) replaced."""
    return _CONTROL.sub(replacement, "" if value is None else str(value))


def display_lines(text: str, replacement: str = "?") -> str:
    """Multi-line text (a YAML dump) for printing as it is: line breaks and tabs kept, every
    other control character replaced."""
    return _CONTROL_BUT_LINES.sub(replacement, text)


def terminal_text(value: Any) -> str:
    """Text safe to print through rich: no control characters, markup shown literally."""
    from rich.markup import escape

    return escape(plain_text(value))


def markdown_cell(value: Any) -> str:
    """Text for one markdown table cell: one line, HTML escaped, markdown syntax and ``|`` shown literally."""
    text = plain_text(value, replacement=" ")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def csv_cell(value: Any) -> Any:
    """A value for a CSV cell: a string a spreadsheet would read as a formula (it starts with
    ``= + - @``, a tab or a carriage return) gets a leading ``'``; numbers and numeric text
    such as ``-0.5`` stay as they are."""
    if not isinstance(value, str) or not value.startswith(_CSV_TRIGGERS):
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value


def csv_value(cell: str) -> str:
    """What :func:`csv_cell` wrote, read back: the ``'`` it put before a formula-like string is
    taken off again (so a parameter ``-aug`` is shown as ``-aug``, not ``'-aug``)."""
    if cell.startswith("'") and csv_cell(cell[1:]) == cell:
        return cell[1:]
    return cell


def quoted(value: Any, limit: int = MAX_QUOTED) -> str:
    """``repr`` of at most ``limit`` characters of ``str(value)`` (control characters escaped, as ``repr``
    does); a longer text is cut and says how long it was: ``'abc…' (5000000 characters)``."""
    text = "" if value is None else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit] + '…'!r} ({len(text)} characters)"


def file_kind(mode: int) -> str:
    """What a file of ``os.stat`` mode ``mode`` is, in words, for a message refusing one that is not a
    regular file ("a named pipe (FIFO)", "a folder"...)."""
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def open_bounded_file(
    path: str | os.PathLike, *, what: str, max_bytes: int = MAX_TEXT_TABLE_BYTES,
    error: type[Exception] = UsageError,
) -> BinaryIO:  # fmt: skip
    """``path`` opened to read (binary), once it is known to be a regular file of at most ``max_bytes`` bytes.

    The file is opened non-blocking (a FIFO named like a score file cannot hang the run) and checked on the
    open descriptor (``fstat``), so what is read is what was checked. The caller closes the handle.

    Raises:
        ``error`` (:class:`~modforge.core.errors.UsageError` by default), naming ``what`` and the file:
        missing, unreadable, not a regular file, larger than ``max_bytes``.
    """
    shown = plain_text(os.fspath(path))
    nonblock = getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, os.O_RDONLY | nonblock | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise error(f"{what} not found: {shown}") from None
    except OSError as exc:
        raise error(f"cannot read the {what} {shown} ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"the {what} {shown} is {file_kind(info.st_mode)}; expected a regular file")
        if info.st_size > max_bytes:
            raise error(f"the {what} {shown} is {info.st_size} bytes, more than the {max_bytes} a {what} may have")
        if nonblock:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb")  # noqa: SIM115 - the caller closes it


def open_text_table(
    path: str | os.PathLike,
    *,
    what: str,
    max_bytes: int = MAX_TEXT_TABLE_BYTES,
    encoding: str = "utf-8",
    errors: str = "replace",
    newline: str | None = None,
    error: type[Exception] = UsageError,
) -> IO[str]:
    """:func:`open_bounded_file` as text (a score file, a protocol: read line by line). The caller closes it.

    Raises:
        ``error``: see :func:`open_bounded_file`.
    """
    binary = open_bounded_file(path, what=what, max_bytes=max_bytes, error=error)
    return io.TextIOWrapper(binary, encoding=encoding, errors=errors, newline=newline)


def data_lines(
    path: str | os.PathLike, *, what: str, max_bytes: int = MAX_TEXT_TABLE_BYTES, error: type[Exception] = UsageError
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
