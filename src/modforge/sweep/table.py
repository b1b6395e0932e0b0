"""``trials.csv``: one row per trial — id, parameters, seed, status, collected metrics,
seconds, the overrides it ran with, and a one-line error — rewritten atomically after
every change, so a sweep killed at any moment leaves a readable table.

A ``trials.csv`` may come from someone else (``modforge sweep-report GIVEN``): it is read
through :func:`~modforge.core.safe_files.open_regular` (never a link, a FIFO or a device),
its size and its fields are bounded, and its ``trial``, ``status`` and ``seconds`` cells are
checked — a bad one is one :class:`TrialsFileError` naming the file, line and column.
Cells are written through :func:`~modforge.core.text_safety.csv_cell` (no formula a
spreadsheet would run)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.config import display_path
from ..core.errors import UsageError
from ..core.safe_files import atomic_open, open_regular
from ..core.text_safety import csv_cell, csv_value

__all__ = ["MAX_FIELD_CHARS", "MAX_FILE_BYTES", "STATUSES", "TrialsFileError", "TrialsTable", "number", "read_rows"]

STATUSES = ("pending", "running", "done", "pruned", "failed", "interrupted")
"""A trial's states; ``pruned``: finished early because the optuna study stopped it (see :mod:`.optuna_search`)."""
FILE = "trials.csv"
MAX_FILE_BYTES = 64 * 1024**2
"""A larger ``trials.csv`` is refused rather than read into memory."""
MAX_FIELD_CHARS = 131_072
"""The longest cell read (the csv module's own default limit, which is process-wide and left as it is)."""


class TrialsFileError(UsageError):
    """A ``trials.csv`` that modforge did not write as it is: one line naming the file, line and column."""


def number(text: str, path: Path, line: int | str, column: str) -> float | None:
    """A numeric cell of ``trials.csv`` (``None`` when empty).

    Raises:
        TrialsFileError: the cell is not a finite number.
    """
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TrialsFileError(f"{display_path(path)} line {line}: column '{column}' holds {_shown(text)}, "
                              "not a finite number; fix or remove that row")  # fmt: skip
    return value


def _shown(text: str, limit: int = 40) -> str:
    from ..core.text_safety import plain_text

    text = plain_text(text)
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def read_rows(sweep_dir: Path) -> list[dict[str, str]]:
    """The rows of ``sweep_dir/trials.csv`` (none when it does not exist), checked: every row
    has a trial id, a known status, and ``seconds`` a number when given.

    Raises:
        TrialsFileError: the file is too large, not CSV, or a row fails those checks.
        UnsafePathError: the file is a link, a FIFO or a device.
    """
    path = sweep_dir / FILE
    if not path.exists() and not path.is_symlink():
        return []
    rows: list[dict[str, str]] = []
    with open_regular(path, "rb") as fh:
        size = fh.seek(0, 2)
        fh.seek(0)
        if size > MAX_FILE_BYTES:
            raise TrialsFileError(f"{display_path(path)} holds {size:,} bytes, more than {MAX_FILE_BYTES:,}; "
                                  "not a trials table modforge wrote")  # fmt: skip
        raw = fh.read(MAX_FILE_BYTES + 1)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TrialsFileError(f"{display_path(path)}: not UTF-8 text") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            rows.append(_checked(row, path, reader.line_num))
    except csv.Error as exc:
        raise TrialsFileError(f"{display_path(path)} line {reader.line_num}: not readable as CSV ({exc})") from None
    return rows


def _checked(row: dict[Any, Any], path: Path, line: int) -> dict[str, str]:
    """One row as plain strings, its ``trial``, ``status`` and ``seconds`` cells checked."""
    clean = {str(k): "" if v is None else csv_value(str(v)) for k, v in row.items() if k is not None}
    for key, value in clean.items():
        if len(value) > MAX_FIELD_CHARS:
            raise TrialsFileError(f"{display_path(path)} line {line}: column '{_shown(key)}' holds "
                                  f"{len(value):,} characters, more than {MAX_FIELD_CHARS:,}")  # fmt: skip
    if not clean.get("trial"):
        raise TrialsFileError(f"{display_path(path)} line {line}: the row has no trial id")
    status = clean.get("status", "")
    if status and status not in STATUSES:
        raise TrialsFileError(f"{display_path(path)} line {line}: status {_shown(status)} is not one of "
                              f"{', '.join(STATUSES)}")  # fmt: skip
    number(clean.get("seconds", ""), path, line, "seconds")
    return clean


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(csv_cell(str(value)))


class TrialsTable:
    """The sweep's trials in the order they were asked, each a row of strings."""

    def __init__(self, sweep_dir: Path, params: Iterable[str], metrics: Iterable[str]):
        self.path = sweep_dir / FILE
        self.params, self.metrics = list(params), list(metrics)
        self.rows: dict[str, dict[str, str]] = {}
        self.previous = {row["trial"]: row for row in read_rows(sweep_dir) if row.get("trial")}

    @property
    def columns(self) -> list[str]:
        return ["trial", *self.params, "seed", "status", *self.metrics, "seconds", "overrides", "error"]

    def set(self, trial_id: str, **values: Any) -> None:
        """Create or update a trial's row (unknown columns are an error of the caller)."""
        row = self.rows.setdefault(trial_id, {c: "" for c in self.columns} | {"trial": trial_id})
        for key, value in values.items():
            if key not in row:
                raise KeyError(key)
            row[key] = _cell(value)

    def write(self) -> None:
        """Replace ``trials.csv`` atomically with the current rows (earlier rows of trials this
        run has not reached yet are kept, so nothing recorded is lost)."""
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.columns, extrasaction="ignore")
        writer.writeheader()
        for row in self.rows.values():
            writer.writerow(row)
        for trial_id, row in self.previous.items():
            if trial_id not in self.rows:
                writer.writerow({c: _cell(row.get(c, "")) for c in self.columns})
        with atomic_open(self.path, "w", newline="", durable=True) as fh:
            fh.write(out.getvalue())
