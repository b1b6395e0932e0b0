"""``trials.csv``: one row per trial — id, parameters, seed, status, collected metrics,
seconds, the overrides it ran with, and a one-line error — rewritten atomically after
every change, so a sweep killed at any moment leaves a readable table."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["STATUSES", "TrialsTable", "read_rows"]

STATUSES = ("pending", "running", "done", "pruned", "failed", "interrupted")
"""A trial's states; ``pruned``: finished early because the optuna study stopped it (see :mod:`.optuna_search`)."""
FILE = "trials.csv"


def read_rows(sweep_dir: Path) -> list[dict[str, str]]:
    """The rows of ``sweep_dir/trials.csv`` (none when it does not exist)."""
    path = sweep_dir / FILE
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


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
                writer.writerow({c: row.get(c, "") for c in self.columns})
        tmp = self.path.with_name(f".{FILE}.tmp")
        with tmp.open("w", newline="") as fh:
            fh.write(out.getvalue())
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self.path)
