"""Stratified k-fold cross-validation: K models, a per-fold table, mean ± std.

The training and validation splits are pooled and divided into K stratified folds
(scikit-learn); fold ``i`` trains on the other K-1 and is validated on fold ``i``. The
test split, when the dataset has one, is kept out of every fold and scored by every
fold's best checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from pathlib import Path
from typing import Any

from ..core.config import Config, display_path
from ..core.errors import UsageError
from ..core.safe_files import write_atomic
from ..data.base import DataSplits
from ..data.splits import sklearn_seed
from ..tasks.base import get_task
from .run_plugins import check_signing_key
from .runner import build_splits, configured_task, train_run
from .runs import write_json

__all__ = ["check_folds", "run_kfold"]

log = logging.getLogger("modforge.experiment")


def _splits(cfg: Config) -> DataSplits:
    return build_splits(cfg, int(cfg.data.get("seed") or 0))


def check_folds(folds: int, flag: str = "--folds") -> None:
    """Refuse a fold count below 2 before anything is loaded or made."""
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise UsageError(f"{flag}: expected a whole number of at least 2, got {folds!r}")


def run_kfold(cfg: Config, folds: int, run_dir: Path) -> dict[str, Any]:
    """Train ``folds`` models into ``run_dir/fold<i>/``; write and return ``kfold.json``.

    ``run_dir`` (and its ``config.yaml``) is made only once the data is loaded and ``folds``
    is known to fit it: a fold count the data cannot have leaves nothing on disk."""
    from sklearn.model_selection import StratifiedKFold

    from .runs import create_run_dir

    check_folds(folds)
    task = configured_task(cfg)
    if task is not None and task.folds_refusal:  # known before any data is loaded
        raise UsageError(f"k-fold cannot split a {task.name} run: {task.folds_refusal}")
    base = _splits(cfg)
    if task is None:
        try:
            task = get_task(base.task)
        except ValueError as exc:
            raise UsageError(f"the dataset's task: {exc}") from None
    if task.folds_refusal:
        raise UsageError(f"k-fold cannot split a {task.name} run: {task.folds_refusal}")
    parts = [s for s in (base.train, base.val) if s is not None and len(s)]
    if not parts or not all(callable(getattr(p, "subset", None)) and hasattr(type(p), "concat") for p in parts):
        kind = type(parts[0]).__name__ if parts else "the dataset"
        raise UsageError(f"k-fold needs a dataset whose splits can be pooled and re-split (subset/concat); "
                         f"{kind} cannot be")  # fmt: skip
    pool = type(parts[0]).concat(parts)
    largest = int(pool.labels.bincount().max()) if len(pool.labels) else 0
    if folds > largest:
        raise UsageError(f"--folds: expected at most {largest} (the most frequent class has {largest} samples in the "
                         f"pooled training and validation data; each fold needs some of them), got {folds}")  # fmt: skip
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=sklearn_seed(cfg.data.get("seed") or 0))
    check_signing_key(cfg.plugins)  # a key that cannot sign the copies: one error, no half-made folder
    create_run_dir(run_dir)
    log.info("k-fold run folder: %s", display_path(run_dir))
    write_atomic(run_dir / "config.yaml", cfg.to_yaml())
    rows = []
    for i, (train_idx, val_idx) in enumerate(splitter.split(pool.labels.numpy(), pool.labels.numpy())):
        fold_splits = dataclasses.replace(
            base, train=pool.subset(train_idx, train=True), val=pool.subset(val_idx, train=False)
        )
        fold_dir = run_dir / f"fold{i}"
        fold_dir.mkdir(parents=True, exist_ok=False)
        log.info("fold %d/%d: training on %d samples, validating on %d", i + 1, folds, len(train_idx), len(val_idx))
        summary = train_run(cfg, fold_dir, splits=fold_splits)
        row: dict[str, Any] = {"fold": i, "train_size": len(train_idx), "val_size": len(val_idx)}
        row.update({k: v for k, v in (summary.get("best") or {}).items() if k != "epoch"})
        row.update({f"test_{k}": v for k, v in (summary.get("test") or {}).items() if isinstance(v, float)})
        rows.append(row)
    keys = [k for k in rows[0] if k not in ("fold", "train_size", "val_size")]
    result = {
        "folds": rows,
        "mean": {k: statistics.fmean(r[k] for r in rows) for k in keys},
        "std": {k: statistics.stdev(r[k] for r in rows) for k in keys},
    }
    write_json(run_dir / "kfold.json", result)
    return result
