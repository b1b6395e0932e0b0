"""``modforge test CONFIG``: evaluate a model built from a config — typically published
weights loaded through ``model.init`` — without training, into a new run folder."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..core.config import Config
from ..core.safe_files import write_atomic
from .run_plugins import snapshot_plugins
from .runner import Experiment, evaluate_split
from .runs import write_json

__all__ = ["evaluate_config"]

log = logging.getLogger("modforge.experiment")


def evaluate_config(cfg: Config, run_dir: Path, *, split: str = "test") -> dict[str, Any]:
    """Build data and model from ``cfg`` (``model.init`` applied), evaluate ``split`` with the
    task's report into ``run_dir`` and write ``config.yaml`` (which records the weights'
    path, format and SHA-256) and ``summary.json``; return the summary."""
    exp = Experiment.build(cfg)
    if not exp.model.init_records:
        log.warning("the config has no model.init: evaluating freshly initialised weights")
    write_atomic(run_dir / "config.yaml", cfg.to_yaml())
    snapshot_plugins(cfg.plugins, run_dir)
    results = evaluate_split(exp, split, out_dir=run_dir, stem="", what="the config's dataset")
    summary = {
        "config": cfg.name,
        "evaluated": "model.init" if exp.model.init_records else "initial weights",
        "init": exp.model.init_records,
        "params": sum(p.numel() for p in exp.model.parameters()),
        **results,
    }
    write_json(run_dir / "summary.json", summary)
    return summary
