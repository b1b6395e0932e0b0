"""From a validated config to a finished run folder: build → fit → test → write.

A run folder holds ``config.yaml`` (resolved), ``metrics.csv``, ``summary.json``,
``checkpoints/`` (``last.pt``, ``best.pt``, periodic files) and ``curves.png``.

The pieces live beside it: :mod:`.experiment` (what a config builds: data, model, metrics, task,
run extensions, the trainer), :mod:`.runs` (the run folder), :mod:`.trained` (a run rebuilt from its
checkpoint, for ``test``/``export``/``predict``). Features of a run (EMA, QAT, distillation, a
user's own) are run extensions (:mod:`modforge.train.extension`): this page does not know them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import Any

from ..core.config import Config, display_path
from ..core.errors import ConfigError
from ..data.base import DataSplits
from ..model.formats import inference_weights
from ..tasks.base import RunRoutines, Task
from ..train import distributed
from ..train.checkpoint import CorruptCheckpointError, load_checkpoint
from ..train.trainer import Trainer
from .experiment import Experiment, build_splits, configured_task, require_a_loss
from .plots import plot_curves
from .runs import open_run_folder, write_json
from .trained import (
    check_run_folder,
    checkpoint_digest,
    evaluate_checkpoint,
    evaluate_split,
    evaluation_stem,
    load_trained,
    run_folder_of,
    trained_checkpoint,
    trained_config,
    trained_experiment,
)

__all__ = ["Experiment", "build_splits", "check_run_folder", "checkpoint_digest", "configured_task",
           "evaluate_checkpoint", "evaluate_split", "evaluation_stem", "fit_and_test", "load_trained",
           "open_run_folder", "require_a_loss", "run_folder_of", "standard_run", "train_run", "trained_checkpoint",
           "trained_config", "trained_experiment"]

log = logging.getLogger("modforge.experiment")


def train_run(
    cfg: Config,
    run_dir: Path,
    *,
    resume: dict[str, Any] | None = None,
    splits: DataSplits | None = None,
    restart: bool = False,
) -> dict[str, Any]:
    """Train a run of ``cfg`` into ``run_dir`` and return its summary. For most tasks that is
    :func:`standard_run` of the experiment ``cfg`` builds (train, test the best checkpoint, write
    ``summary.json`` and ``curves.png``). A task with a run routine of its own gets the run instead:
    one the config names (its ``task:`` or its section: the continual task's task sequence, a
    plug-in's run per seed) before anything is built — it builds what it needs; one the dataset
    names once the experiment is built, handed over as ``routines.built``.

    ``run_dir`` is made (:func:`open_run_folder`) only once everything is built; it may
    exist if empty. ``restart``: it is a run folder without a checkpoint, trained again from scratch."""
    task = configured_task(cfg)
    if task is not None and _has_own_run(task):
        return task.run(ROUTINES, cfg, run_dir, resume=resume, splits=splits, restart=restart)
    exp = Experiment.build(cfg, splits, init_weights=resume is None)  # a resumed run's weights are its checkpoint's
    if _has_own_run(exp.task):
        routines = dataclasses.replace(ROUTINES, built=exp)
        return exp.task.run(routines, cfg, run_dir, resume=resume, splits=exp.splits, restart=restart)
    return standard_run(exp, run_dir, resume=resume, restart=restart)


def _has_own_run(task: Task) -> bool:
    """Whether ``task`` trains with a run routine of its own (overrides :meth:`Task.run`)."""
    return type(task).run is not Task.run


def fit_and_test(
    cfg: Config,
    run_dir: Path,
    *,
    resume: dict[str, Any] | None = None,
    splits: DataSplits | None = None,
    restart: bool = False,
) -> dict[str, Any]:
    """:func:`standard_run` of the experiment ``cfg`` builds, whatever its task (what a task's own
    run routine calls for the standard run: ``routines.fit_and_test``)."""
    return standard_run(Experiment.build(cfg, splits, init_weights=resume is None), run_dir, resume=resume,
                        restart=restart)  # fmt: skip


def standard_run(exp: Experiment, run_dir: Path, *, resume: dict[str, Any] | None = None,
                 restart: bool = False) -> dict[str, Any]:  # fmt: skip
    """The standard run of a built experiment: train (or resume), test ``best.pt`` with the task's
    report, write ``summary.json`` and ``curves.png``; return the summary."""
    train_loader, val_loader, test_loader = _loaders(exp)
    require_a_loss(exp)
    trainer = exp.trainer(train_loader, run_dir, trainer_class=exp.trainer_class, resume=resume)
    main = distributed.is_main_process()
    if main:  # only now: a config that fails to build leaves nothing on disk
        open_run_folder(exp.cfg, run_dir, resumed=resume is not None, restart=restart)
    trainer.fit(train_loader, val_loader, resume=resume)
    summary = _summary(exp, trainer)
    if test_loader is not None:
        summary.update(_test(exp, trainer, test_loader, run_dir, main))
    if distributed.is_distributed():
        summary["processes"] = distributed.world_size()
    if main:
        write_json(run_dir / "summary.json", summary)
        plot_curves(trainer.history, run_dir / "curves.png", title=exp.cfg.name)
    trainer.end_run(summary)  # after the files: trackers keep them
    return summary


def _loaders(exp: Experiment) -> tuple[Any, Any, Any]:
    """Train, val and test loaders; a training split that gives no batch is one clear error."""
    if len(exp.splits.train) == 0:
        raise ConfigError("the dataset's training split is empty: nothing to train on", path="data")
    loaders = exp.loaders()
    if len(loaders[0]) == 0:
        raise ConfigError(f"data.batch_size ({exp.loader.batch_size}) with drop_last leaves no batch of the "
                          f"{len(exp.splits.train)} training samples", path="data.batch_size",
                          source=exp.cfg.where("data.batch_size"))  # fmt: skip
    return loaders


def _summary(exp: Experiment, trainer: Trainer) -> dict[str, Any]:
    """What ``summary.json`` says of the training: its length, size, time, last row and best epoch."""
    summary: dict[str, Any] = {
        "config": exp.cfg.name,
        "epochs": len(trainer.history),
        "steps": trainer.global_step,
        "params": sum(p.numel() for p in exp.model.parameters()),
        "monitor": exp.monitor,
        "stopped_early": bool(trainer.stop_reason),
        "stop_reason": trainer.stop_reason or None,
        "train_seconds": round(trainer.extra_results.get("train_seconds", 0.0), 3),
        "last": trainer.history[-1] if trainer.history else {},
    }
    checkpoint = _checkpoint_callback(trainer)
    if checkpoint is not None and checkpoint.best is not None:
        summary["best"] = {"epoch": checkpoint.best_epoch, exp.monitor: checkpoint.best}
    return summary


def _checkpoint_callback(trainer: Trainer) -> Any:
    return next((cb for cb in trainer.callbacks if type(cb).__name__ == "Checkpoint"), None)


def _test(exp: Experiment, trainer: Trainer, test_loader: Any, run_dir: Path, main: bool) -> dict[str, Any]:
    """The task's test of ``best.pt`` (rank 0 reads it and hands the weights to the other processes,
    which may not see its disk); without one, of the final weights as evaluation sees them (the
    run extensions' evaluation weights: ``train.ema``'s average)."""
    best_path = run_dir / "checkpoints" / "best.pt"
    earlier = getattr(_checkpoint_callback(trainer), "best_file", None)
    if not best_path.exists() and earlier and Path(earlier).exists():  # resumed into a new folder, no better
        best_path = Path(earlier)  # epoch since: the best weights are the resumed run's best.pt
    best = _best_weights(best_path) if main else None
    best = distributed.broadcast_object(best, what="sharing best.pt for the test")
    if best is not None:
        exp.model.load_state_dict(best)
        evaluated = "checkpoints/best.pt" if best_path.parent.parent == run_dir else display_path(best_path)
        weights = contextlib.nullcontext()
    else:
        evaluated = f"final weights ({trainer.evaluated_as})" if trainer.evaluated_as else "final weights"
        weights = trainer.evaluation_weights()
    with weights:
        report = exp.task.test(trainer, test_loader, exp.splits.test, split="test", out_dir=run_dir if main else None,
                               stem="")  # fmt: skip
    return {**report, "evaluated": evaluated}


def _best_weights(path: Path) -> dict[str, Any] | None:
    """``best.pt``'s weights for the end-of-training test (its weight average with
    ``train.ema``); ``None`` (the final weights are tested, with a warning) when there is
    none or it is damaged."""
    if not path.exists():
        return None
    try:
        return inference_weights(load_checkpoint(path))
    except CorruptCheckpointError as exc:
        log.warning("%s; testing the final weights instead", exc)
        return None


ROUTINES = RunRoutines(
    fit_and_test=fit_and_test,
    build=Experiment.build,
    open_run_folder=open_run_folder,
    require_a_loss=require_a_loss,
    write_json=write_json,
)
"""What the runner lends a task's :meth:`~modforge.tasks.base.Task.run`."""
