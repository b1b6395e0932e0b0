"""``search: optuna`` — Bayesian search (TPE) through Optuna, with pruning and a study that
lives in the sweep folder.

The study is ``SWEEP/optuna.db`` (SQLite; the study is named after the sweep). Each Optuna
trial is one modforge trial: its number ``n`` gives the id ``tNNN-<key><value>...``
(``t003-lr0.0012-weight_decay0.034``, the sweep's seed appended), stored on the Optuna trial as the
user attribute ``modforge_trial``; the trial's run folder is ``SWEEP/trials/<id>``.

One seed per trial: the objective is the value of ``optuna.metric`` in the trial's
``summary.json`` for the sweep's one seed (``seeds: [S]``, or the config's own seed). A search
over settings averaged over seeds multiplies the cost of every suggestion; run the best
settings over seeds afterwards, with a grid sweep.

Resuming. A sweep killed and started again continues the same study: trials the study has
finished (complete, pruned, failed) are never asked again; trials it still counts as
running (the sweep died while they ran) are handed out first, with the same number, id and
parameters, so the driver skips the ones whose run had in fact finished and resumes the
others from their checkpoints. Suggestions are reproducible: the sampler is seeded from
``optuna.seed`` and the trial's number, so the same study history gives the same next trial.

Pruning. Every trial's command gets the ``optuna_pruning`` callback appended to the config's
own ``train.callbacks`` (they are kept): it reports the per-epoch metric to the study and
stops the run when the median pruner says so, leaving ``pruned.json`` in the run folder; the
sweep then records the trial as ``pruned`` and tells the study ``TrialState.PRUNED``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

from ..core.config import display_path, load_config
from ..core.errors import ConfigError
from ..core.safe_files import UnsafePathError, ensure_folder
from .executor import import_extra
from .search import TrialResult, _short, register_search
from .spec import OptunaSpec, RandomParam, SweepSpec, SweepSpecError
from .trial import Trial, assign_ids, format_value

__all__ = ["ID_ATTR", "STUDY_FILE", "OptunaSearch"]

log = logging.getLogger("modforge.sweep")

STUDY_FILE = "optuna.db"
"""The study's SQLite file in the sweep folder."""
ID_ATTR = "modforge_trial"
"""The Optuna trial's user attribute holding its modforge trial id."""
_SQLITE_TIMEOUT_S = 60  # the trials report to the same file: wait for its lock rather than fail
_PLAIN = (type(None), bool, int, float, str)  # what Optuna stores as a categorical value as it is


class OptunaSearch:
    """Asks an Optuna study for trials and tells it their results (see the module docstring)."""

    adaptive = True
    """Trials are chosen from results: ``--dry-run`` cannot list them (it shows :meth:`example`)."""

    def __init__(self, spec: SweepSpec, sweep_dir: Path):
        if spec.optuna is None:
            raise SweepSpecError("search: optuna needs an 'optuna:' section", path="optuna",
                                 source=display_path(spec.file))  # fmt: skip
        import_extra("optuna", "search: optuna", "optuna")
        self.spec, self.options, self.sweep_dir = spec, spec.optuna, sweep_dir
        self.total: int | None = spec.optuna.trials
        self._study: Any = None
        self._pending: list[Trial] = []  # trials the study still counts as running: handed out first
        self._numbers: dict[str, int] = {}  # modforge trial id → Optuna trial number
        self._callbacks: list[Any] | None = None

    # ------------------------------------------------------------------ study
    @property
    def storage_url(self) -> str:
        """``sqlite:///SWEEP/optuna.db`` (absolute: the trials open it from their own folders)."""
        return f"sqlite:///{Path(os.path.abspath(self.sweep_dir)).resolve() / STUDY_FILE}"

    def check_study_file(self) -> None:
        """``optuna.db`` and SQLite's files beside it (journal, WAL, shared memory) are absent or
        plain regular files of their own — never a link SQLite would write through.

        Raises:
            UnsafePathError: naming the file.
        """
        for suffix in ("", "-journal", "-wal", "-shm"):
            path = self.sweep_dir / f"{STUDY_FILE}{suffix}"
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a plain regular file"
                raise UnsafePathError(f"the study file {display_path(path)} is {kind}; modforge does not open a "
                                      "study through it, nothing was changed (remove it, or choose another "
                                      "--sweep-dir)")  # fmt: skip

    def study(self) -> Any:
        """The study, created on first use (a re-run loads it and queues its running trials)."""
        if self._study is not None:
            return self._study
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        ensure_folder(self.sweep_dir, named=True)
        self.check_study_file()
        storage = optuna.storages.RDBStorage(self.storage_url,
                                             engine_kwargs={"connect_args": {"timeout": _SQLITE_TIMEOUT_S}})  # fmt: skip
        direction = "maximize" if self.options.goal == "max" else "minimize"
        study = optuna.create_study(storage=storage, study_name=self.spec.name, direction=direction,
                                    load_if_exists=True)  # fmt: skip
        if study.direction.name.lower() != direction:
            raise SweepSpecError(
                f"the study in {display_path(self.sweep_dir / STUDY_FILE)} was made to {study.direction.name.lower()} "
                f"{self.options.metric}, but the sweep file now says goal: {self.options.goal}; nothing was changed. "
                "Use another --sweep-dir", path="optuna.goal", source=display_path(self.spec.file),
            )  # fmt: skip
        self._study = study
        for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if set(frozen.params) != {p.key for p in self.options.params}:  # died between ask and its suggestions
                study.tell(frozen.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
                continue
            self._pending.append(self._trial(frozen.number, self._decode(frozen.params)))
        return study

    def _sampler(self, number: int) -> Any:
        """A sampler seeded from ``optuna.seed`` and the trial's number: the same study history
        gives the same suggestion, in an uninterrupted sweep and in a resumed one."""
        import optuna

        seed = (self.options.seed * 1_000_003 + number) % 2**32
        if self.options.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.options.startup_trials)

    # -------------------------------------------------------------- ask / tell
    def ask(self) -> Trial | None:
        study = self.study()
        if self._pending:
            return self._pending.pop(0)
        if len(study.get_trials(deepcopy=False)) >= self.options.trials:
            return None
        study.sampler = self._sampler(len(study.get_trials(deepcopy=False)))
        handle = study.ask()
        values = {p.key: _suggest(handle, p) for p in self.options.params}
        trial = self._trial(handle.number, self._decode(values))
        handle.set_user_attr(ID_ATTR, trial.id)
        return trial

    def tell(self, trial: Trial, result: TrialResult) -> None:
        """Complete the Optuna trial: its metric value when done, ``PRUNED``, or ``FAIL`` (a
        failed run, or a finished one without the metric)."""
        from optuna.trial import TrialState

        number = self._numbers[trial.id]
        study = self.study()
        value = result.metrics.get(self.options.metric)
        if result.status == "pruned":
            study.tell(number, state=TrialState.PRUNED, skip_if_finished=True)
        elif result.status == "done" and value is not None:
            study.tell(number, value, skip_if_finished=True)
        else:
            if result.status == "done":
                log.warning("trial %s finished without %s in its summary.json: told to the study as failed",
                            trial.id, self.options.metric)  # fmt: skip
            study.tell(number, state=TrialState.FAIL, skip_if_finished=True)

    def example(self) -> Trial:
        """A trial as the search would make it (the space's low ends, first choices), without
        touching the study: what ``--dry-run`` shows."""
        return self._trial(0, {p.key: p.args[0] for p in self.options.params})

    # ----------------------------------------------------------------- trials
    def _decode(self, values: dict[str, Any]) -> dict[str, Any]:
        """Suggested values in the space's order, choices that are not plain values read back."""
        out = {}
        for p in self.options.params:
            value = values[p.key]
            if p.kind == "choice" and not all(isinstance(c, _PLAIN) for c in p.args):
                value = json.loads(value)
            out[p.key] = value
        return out

    def _trial(self, number: int, values: dict[str, Any]) -> Trial:
        seed = self.spec.seeds[0] if self.spec.seeds else None
        parts = (f"t{number:03d}", *(f"{_short(k)}{format_value(v)}" for k, v in values.items()))
        overrides = {**self.spec.overrides, **values}
        (trial,) = assign_ids([Trial(params=dict(values), overrides=overrides, seed=seed, id_parts=parts)])
        self._numbers[trial.id] = number
        return dataclasses.replace(trial, extra={"train.callbacks": [*self._user_callbacks(), self._pruning(number)]})

    def _pruning(self, number: int) -> dict[str, Any]:
        o: OptunaSpec = self.options
        args = {"storage": self.storage_url, "study": self.spec.name, "trial": number, "pruner": o.pruner,
                "startup_trials": o.startup_trials, "warmup_epochs": o.warmup_epochs}  # fmt: skip
        if o.prune_on:
            args["monitor"] = o.prune_on
        return {"type": "optuna_pruning", "args": args}

    def _user_callbacks(self) -> list[Any]:
        """The config's ``train.callbacks`` as the sweep's fixed overrides leave them (the
        pruning callback is appended to them, never put in their place)."""
        if self._callbacks is None:
            touching = [f"{k}={json.dumps(v)}" for k, v in self.spec.overrides.items()
                        if k in ("train", "train.callbacks") or k.startswith("train.callbacks.")]  # fmt: skip
            try:
                found = load_config(self.spec.config, touching).get("train.callbacks", None) or []
            except ConfigError:  # the trial will report the config's error itself
                found = []
            items = found if isinstance(found, list) else [found]
            self._callbacks = [c for c in items if _callback_type(c) != "optuna_pruning"]
        return list(self._callbacks)


def _callback_type(spec: Any) -> Any:
    return spec.get("type") if isinstance(spec, dict) else spec


def _suggest(handle: Any, p: RandomParam) -> Any:
    """Ask the Optuna trial for ``p``'s value (a choice that is not a plain value is suggested
    as its JSON text)."""
    if p.kind == "uniform":
        return handle.suggest_float(p.key, float(p.args[0]), float(p.args[1]))
    if p.kind == "loguniform":
        return handle.suggest_float(p.key, float(p.args[0]), float(p.args[1]), log=True)
    if p.kind == "int":
        return handle.suggest_int(p.key, int(p.args[0]), int(p.args[1]))
    choices = list(p.args)
    if not all(isinstance(c, _PLAIN) for c in choices):
        choices = [json.dumps(c, sort_keys=True) for c in choices]
    return handle.suggest_categorical(p.key, choices)


register_search("optuna")(OptunaSearch)
