"""``optuna_pruning`` — report every epoch's metric to an Optuna trial, and stop the run when
the study prunes it.

``modforge sweep`` with ``search: optuna`` adds this callback to each trial's command (after
the config's own callbacks) with the study's storage URL, its name and the trial's number;
it can also be configured by hand for a run that belongs to a study made elsewhere.

After every epoch rank 0 reports the monitored value as the trial's intermediate value at
step = epoch and asks the pruner; the decision is shared with every other process, so all
ranks stop together (at the end of that epoch, through :meth:`Trainer.request_stop`, like
early stopping: the run still saves its checkpoint, tests and writes ``summary.json``).
A pruned run leaves ``pruned.json`` in its folder (``{"trial", "epoch", "monitor",
"value"}``), which is how the sweep records the trial as ``pruned``. Values are stored in
the study's direction: a metric that improves the other way (``val_loss`` in a study that
maximises accuracy) is reported negated, so the pruner compares like with like.

Talking to the study never stops a run by itself: a storage that cannot be reached costs
one warning and the run goes on unpruned. The decision is part of the callback's state,
so a pruned run killed before its end stops again when it is resumed.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
from pathlib import Path
from typing import Any, Literal, Optional

from ...core.constraints import NonNegativeInt
from ...core.errors import UsageError
from ...core.registries import register_callback
from .. import distributed
from .base import Callback, Mode, monitored_value

log = logging.getLogger("modforge.train")

MARKER = "pruned.json"
"""The file a pruned run leaves in its folder (the sweep reads it to record the trial as ``pruned``)."""
_SQLITE_TIMEOUT_S = 60  # trials and the sweep share one SQLite file: wait for its lock, do not fail


@register_callback("optuna_pruning")
class OptunaPruning(Callback):
    """Reports the monitored metric to trial ``trial`` of an Optuna study after every epoch and
    stops training when the study's pruner says the trial is not worth finishing.

    Args:
        storage: the study's storage URL (``sqlite:///SWEEP/optuna.db``).
        study: the study's name.
        trial: the trial's number in the study.
        monitor: the per-epoch metric reported (default: the config's ``train.monitor``).
        mode: 'max', 'min', or 'auto' (from the metric's direction); a metric that improves
            against the study's direction is reported negated.
        pruner: 'median' (prune a trial whose value is worse than the median of earlier trials
            at the same epoch) or 'none' (report only).
        startup_trials: trials that must finish before any trial is pruned.
        warmup_epochs: the first epochs of every trial, which are never pruned.
    """

    order = 25  # after early stopping, before the checkpoint (which then saves the decision)

    def __init__(
        self, storage: str, study: str, trial: NonNegativeInt, monitor: Optional[str] = None, mode: Mode = "auto",
        pruner: Literal["median", "none"] = "median", startup_trials: NonNegativeInt = 5,
        warmup_epochs: NonNegativeInt = 1,
    ):  # fmt: skip
        if monitor is None:
            raise ValueError("optuna_pruning needs a metric to report (args.monitor or train.monitor)")
        if pruner not in ("median", "none"):
            raise ValueError(f"optuna_pruning: pruner must be 'median' or 'none', got {pruner!r}")
        if importlib.util.find_spec("optuna") is None:
            raise UsageError('the optuna_pruning callback needs the optuna package: pip install "modforge[optuna]"')
        self.storage, self.study, self.trial, self.monitor, self.mode = storage, study, int(trial), monitor, mode
        self.pruner, self.startup_trials, self.warmup_epochs = pruner, startup_trials, warmup_epochs
        self.pruned: dict[str, Any] | None = None
        self._handle: Any = None  # the optuna Trial, connected on the first report (rank 0 only)
        self._sign = 1.0
        self._broken = False

    # ------------------------------------------------------------------ hooks
    def on_fit_start(self, trainer) -> None:
        if self.pruned is not None:  # resumed after the decision: stop again, with the same marker
            self._stop(trainer)

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        if self.pruned is not None:
            return
        value = monitored_value(row, self.monitor, "optuna_pruning")
        prune = self._report(trainer, row["epoch"], value) if distributed.is_main_process() else False
        if distributed.broadcast_object(prune, what="sharing the optuna pruning decision"):
            self.pruned = {"trial": self.trial, "epoch": row["epoch"], "monitor": self.monitor,
                           "value": None if value is None else float(value)}  # fmt: skip
            self._stop(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"pruned": self.pruned}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pruned = state.get("pruned")

    # ---------------------------------------------------------------- helpers
    def _stop(self, trainer) -> None:
        assert self.pruned is not None
        if distributed.is_main_process() and trainer.run_dir is not None:
            _write_json(Path(trainer.run_dir) / MARKER, self.pruned)
        shown = "nan" if self.pruned["value"] is None else f"{self.pruned['value']:.6g}"
        trainer.request_stop(f"optuna pruned trial {self.trial} at epoch {self.pruned['epoch']} "
                             f"({self.monitor} {shown})")  # fmt: skip

    def _connect(self, trainer) -> Any:
        import optuna

        storage = optuna.storages.RDBStorage(self.storage, engine_kwargs={"connect_args": {"timeout": _SQLITE_TIMEOUT_S}}
                                             if self.storage.startswith("sqlite") else None)  # fmt: skip
        pruner = (optuna.pruners.NopPruner() if self.pruner == "none" else optuna.pruners.MedianPruner(
            n_startup_trials=self.startup_trials, n_warmup_steps=self.warmup_epochs + 1))  # fmt: skip
        study = optuna.load_study(study_name=self.study, storage=storage, pruner=pruner)
        trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(self.study),
                                                                   self.trial)  # fmt: skip
        mode = trainer.direction(self.monitor) if self.mode == "auto" else self.mode
        wanted = "max" if study.direction == optuna.study.StudyDirection.MAXIMIZE else "min"
        self._sign = 1.0 if mode == wanted else -1.0
        return optuna.trial.Trial(study, trial_id)

    def _report(self, trainer, epoch: int, value: float | None) -> bool:
        """Report ``value`` at step ``epoch``; whether the pruner stops the trial (rank 0)."""
        if self._broken or value is None or not math.isfinite(value):
            return False
        try:
            if self._handle is None:
                self._handle = self._connect(trainer)
            self._handle.report(self._sign * float(value), step=int(epoch))
            return bool(self._handle.should_prune())
        except Exception as exc:  # noqa: BLE001 - a study out of reach must not end a run
            self._broken = True
            log.warning("optuna_pruning: cannot report to trial %d of study '%s' (%s); training goes on unpruned",
                        self.trial, self.study, exc)  # fmt: skip
            return False


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` through a new uniquely named temporary file renamed into place
    (a link planted at ``path`` or at any temporary name is never written through)."""
    from ...core.safe_files import write_atomic

    write_atomic(path, json.dumps(data), durable=True)
