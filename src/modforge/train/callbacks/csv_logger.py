"""``csv_logger`` — ``metrics.csv``, one row per epoch (always on)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ...core.registries import register_callback
from ...core.safe_files import atomic_open, inside, is_relative_name, open_append
from .base import Callback


@register_callback("csv_logger")
class CSVLogger(Callback):
    """Writes the trainer's history to ``metrics.csv`` in the run folder: the whole file at
    the start (so a resumed run holds exactly the rows of its checkpoint, no duplicates),
    then one flushed row per epoch; a new column rewrites the file with the wider header.

    Args:
        filename: file name inside the run folder.
    """

    order = 30
    rank_zero_only = True  # writes files / the terminal

    def __init__(self, filename: str = "metrics.csv"):
        if not is_relative_name(filename):
            raise ValueError(f"filename must be a file name inside the run folder, got {filename!r}")
        self.filename = filename
        self.columns: list[str] = []
        self._file = None
        self._writer: csv.DictWriter | None = None

    def _rewrite(self, path: Path, rows: list[dict[str, Any]]) -> None:
        self._close()
        self.columns = []
        for row in rows:
            self.columns += [k for k in row if k not in self.columns]
        with atomic_open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)
        self._file = open_append(path, newline="")  # kept open for the run, closed in on_fit_end
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file, self._writer = None, None

    def _path(self, trainer) -> Path:
        return inside(trainer.run_dir, self.filename, "csv_logger filename")

    def on_fit_start(self, trainer) -> None:
        if trainer.run_dir is not None:
            self._rewrite(self._path(trainer), trainer.history)

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        if trainer.run_dir is None:
            return
        if self._writer is None or any(k not in self.columns for k in row):
            self._rewrite(self._path(trainer), trainer.history)
            return
        self._writer.writerow(row)
        self._file.flush()

    def on_fit_end(self, trainer) -> None:
        self._close()
