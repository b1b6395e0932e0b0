"""``csv_logger`` — ``metrics.csv``, one row per epoch (always on)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ...core.registries import register_callback
from .base import Callback


@register_callback("csv_logger")
class CSVLogger(Callback):
    """Writes the trainer's history to ``metrics.csv`` in the run folder: the whole file at
    the start (so a resumed run holds exactly the rows of its checkpoint, no duplicates),
    then one row per epoch; a new column rewrites the file with the wider header.

    Args:
        filename: file name inside the run folder.
    """

    order = 30

    def __init__(self, filename: str = "metrics.csv"):
        self.filename = filename
        self.columns: list[str] = []

    def _path(self, trainer) -> Path | None:
        return Path(trainer.run_dir) / self.filename if trainer.run_dir else None

    def _rewrite(self, path: Path, rows: list[dict[str, Any]]) -> None:
        self.columns = []
        for row in rows:
            self.columns += [k for k in row if k not in self.columns]
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)
        tmp.replace(path)

    def on_fit_start(self, trainer) -> None:
        path = self._path(trainer)
        if path is not None:
            self._rewrite(path, trainer.history)

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        path = self._path(trainer)
        if path is None:
            return
        if any(k not in self.columns for k in row) or not path.exists():
            self._rewrite(path, trainer.history)
            return
        with open(path, "a", newline="") as fh:
            csv.DictWriter(fh, fieldnames=self.columns).writerow(row)
