"""Strings from data made harmless for where they are shown: a terminal, a markdown page, a CSV cell.

A label, a class name, a title or a CSV value in a folder someone gave you is data. Printed
raw, an escape sequence rewrites the terminal, rich markup (``[/bold]``) crashes the
printer, ``|`` or HTML breaks a results table, and ``=cmd|' /C calc'!A0`` runs in a
spreadsheet. Each function here turns such a string into plain text for one destination.

A line from a data file quoted in an error message is data too: :func:`quoted` shows at most
:data:`MAX_QUOTED` characters of it, so a malformed 5 MB line gives a one-line error, not a 5 MB
one. (Opening such a file within bounds is :func:`modforge.core.safe_files.open_bounded_file`'s.)
"""

from __future__ import annotations

import html
import re
from typing import Any

__all__ = [
    "MAX_QUOTED",
    "csv_cell",
    "csv_value",
    "display_lines",
    "markdown_cell",
    "plain_text",
    "quoted",
    "terminal_text",
]

MAX_QUOTED = 200
"""Most characters of a line from a data file an error message quotes."""

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
