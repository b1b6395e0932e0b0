"""Printing for the command line: rich tables on a terminal, wide plain tables in pipes.

Every string a table shows — title, column names, cells — may come from data (a class name
in an artifact, a file name, a value in a run folder someone gave you), so each is passed
through :func:`~modforge.core.text_safety.terminal_text`: control characters (terminal escape
sequences) replaced, rich markup shown literally. Callers pass plain strings, never markup
and never pre-escaped text.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from ..core.text_safety import plain_text, terminal_text

__all__ = ["console", "print_table"]

_PIPE_WIDTH = 200


def console(stderr: bool = False):
    """A rich Console; when not writing to a terminal, wide and without colour codes."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    is_tty = hasattr(stream, "isatty") and stream.isatty()
    width = None if is_tty else max(_PIPE_WIDTH, shutil.get_terminal_size((_PIPE_WIDTH, 24)).columns)
    return Console(file=stream, width=width, no_color=not is_tty, highlight=False, soft_wrap=False)


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    stderr: bool = False,
) -> None:
    """Print ``rows`` under ``columns`` as one table (cells are converted with ``str``; every string
    is shown as plain text: no control characters, markup literal)."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in columns:
        table.add_column(terminal_text(col), overflow="fold")
    for row in rows:
        table.add_row(*(terminal_text(c) for c in row))
    out = console(stderr)
    if title is not None:  # its own line, never folded to the table's width (a path stays whole)
        out.print(plain_text(title), markup=False, soft_wrap=True)
    out.print(table)
