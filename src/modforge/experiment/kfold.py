"""Stratified k-fold cross-validation: K models, a per-fold table, mean ± std.

The training and validation splits are pooled and divided into K stratified folds
(scikit-learn); fold ``i`` trains on the other K-1 and is validated on fold ``i``. The
test split, when the dataset has one, is kept out of every fold and scored by every
fold's best checkpoint.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any

from ..core.config import Config
from ..core.errors import UsageError
from ..core.registries import DATASETS
from ..data.base import DataSplits
from .runner import train_run
from .runs import write_json
from .settings import LOADER_KEYS

__all__ = ["run_kfold"]


def _splits(cfg: Config) -> DataSplits:
    data = {k: v for k, v in (cfg.data.get("data") or {}).items() if k not in LOADER_KEYS}
    seed = int(cfg.data.get("seed") or 0)
    return DATASETS.build(
        data, path="data", origin_of=cfg.where, allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir), seed=seed
    )


def run_kfold(cfg: Config, folds: int, run_dir: Path) -> dict[str, Any]:
    """Train ``folds`` models into ``run_dir/fold<i>/``; write and return ``kfold.json``."""
    from sklearn.model_selection import StratifiedKFold

    if folds < 2:
        raise UsageError(f"--folds must be at least 2, got {folds}")
    base = _splits(cfg)
    parts = [s for s in (base.train, base.val) if s is not None and len(s)]
    if not parts or not all(callable(getattr(p, "subset", None)) and hasattr(type(p), "concat") for p in parts):
        raise UsageError("k-fold needs a dataset whose splits can be pooled and re-split (subset/concat)")
    pool = type(parts[0]).concat(parts)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=int(cfg.data.get("seed") or 0))
    rows = []
    for i, (train_idx, val_idx) in enumerate(splitter.split(pool.labels.numpy(), pool.labels.numpy())):
        fold_splits = dataclasses.replace(
            base, train=pool.subset(train_idx, train=True), val=pool.subset(val_idx, train=False)
        )
        fold_dir = run_dir / f"fold{i}"
        fold_dir.mkdir(parents=True, exist_ok=False)
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
