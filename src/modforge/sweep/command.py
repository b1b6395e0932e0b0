"""The one place a trial's command line is made — every executor (the local process pool,
a Ray task) runs what :meth:`TrialJob.argv` returns, on the machine that runs the trial.

A trial is ``python -m modforge train CONFIG [overrides ...] --seed S --run-dir TRIAL_DIR``;
where the trial's folder already holds a checkpoint (a sweep, or a worker, killed part-way),
it is ``python -m modforge train --resume TRIAL_DIR`` instead — modforge's resume continues
bit for bit, so the result equals an uninterrupted trial's. A folder an earlier attempt left
without any checkpoint holds nothing worth keeping and is emptied first.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from .spec import AUTO_KEYS, SweepSpec
from .trial import Trial

__all__ = ["TrialJob", "build_job", "override_tokens", "processes_of", "user_tokens"]

SUMMARY = "summary.json"


def _yaml_scalar(value: Any) -> str:
    """A value as ``KEY=VALUE`` text that reads back (as YAML) to the same value."""
    from ..core.coercion import parse_scalar

    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:  # YAML 1.1 reads 1e-05 as a string
            mantissa, _, exponent = text.partition("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    if isinstance(value, str) and value == value.strip() and parse_scalar(value) == value:
        return value
    return json.dumps(value, separators=(",", ":"))


def _flag_value(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [",".join(_yaml_scalar(v) for v in value)]
    return [_yaml_scalar(value)]


def override_tokens(overrides: dict[str, Any]) -> list[str]:
    """Command-line tokens for an overrides mapping: ``--flag VALUE`` (``--flag`` alone for a
    ``null`` value; a list joined with commas, as part flags take them) and ``KEY.PATH=VALUE``;
    the special ``config`` and ``command`` keys are not tokens."""
    tokens: list[str] = []
    for key, value in overrides.items():
        if key in ("config", "command"):
            continue
        if key.startswith("--"):
            tokens += [key, *_flag_value(value)]
        else:
            tokens.append(f"{key}={_yaml_scalar(value)}")
    return tokens


def user_tokens(trial: Trial) -> list[str]:
    """What the sweep file makes the trial set (no folder, no thread count): ``trials.csv``'s
    ``overrides`` column, and how a re-run recognises that a finished trial is still the same."""
    tokens = override_tokens(trial.overrides)
    return tokens + (["--seed", str(trial.seed)] if trial.seed is not None else [])


@dataclasses.dataclass(frozen=True)
class TrialJob:
    """Everything needed to run one trial anywhere its folder is visible (picklable).

    Attributes:
        trial_id: the trial's id.
        run_dir: the trial's run folder (``SWEEP/trials/<id>``).
        log: where the trial's stdout and stderr go (``SWEEP/trials/<id>.log``, appended).
        fresh: the command for a trial with nothing saved yet.
        resume: the command for a trial with a checkpoint (``None``: the command cannot resume, e.g. ``test``).
        threads: the torch threads the trial uses (what an executor reserves for it).
        processes: the trial's training processes (its ``--nproc``; what an executor reserves
            devices for).
    """

    trial_id: str
    run_dir: Path
    log: Path
    fresh: tuple[str, ...]
    resume: tuple[str, ...] | None
    threads: int
    processes: int = 1

    def finished(self) -> bool:
        """Whether the trial's run folder holds its ``summary.json`` (written when a run completes)."""
        return (self.run_dir / SUMMARY).is_file()

    def argv(self) -> list[str]:
        """The command to run now, decided from the folder as it is: resume from a checkpoint,
        or start afresh (emptying a folder an earlier attempt left without checkpoints)."""
        checkpoints = self.run_dir / "checkpoints"
        if checkpoints.is_dir() and any(p.suffix == ".pt" for p in checkpoints.iterdir()):
            if self.resume is not None:
                return list(self.resume)
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)
        return list(self.fresh)

    def shown(self) -> str:
        """The fresh command as a shell line (for ``--dry-run`` and logs)."""
        return shlex.join(self.fresh)


def processes_of(trial: Trial) -> int:
    """The trial's ``--nproc`` (1 without it, or with a value ``modforge train`` will refuse)."""
    value = trial.overrides.get("--nproc")
    try:
        return max(1, int(value)) if value is not None and not isinstance(value, bool) else 1
    except (TypeError, ValueError):
        return 1


def build_job(spec: SweepSpec, trial: Trial, sweep_dir: Path, threads: int) -> TrialJob:
    """The :class:`TrialJob` of ``trial`` in ``sweep_dir``, with ``threads`` torch threads
    (``train.num_threads``, unless the sweep file sets it), ``train.progress=never`` (unless
    set: the log gets lines, not a progress bar) and the search's own overrides
    (:attr:`Trial.extra`). A resumed trial keeps its ``--nproc`` (the rest is in its saved config)."""
    run_dir = (sweep_dir / "trials" / trial.id).resolve()
    command = trial.overrides.get("command", spec.command)
    config = trial.overrides.get("config") or str(spec.config)
    auto = dict(zip(AUTO_KEYS, (threads, "never"), strict=True))
    extra = [f"{k}={v}" for k, v in auto.items() if k not in spec.setting_keys()] + override_tokens(trial.extra)
    base = [sys.executable, "-m", "modforge", command]
    fresh = (*base, config, *user_tokens(trial), *extra, "--run-dir", str(run_dir))
    processes = processes_of(trial)
    nproc = ("--nproc", str(processes)) if "--nproc" in trial.overrides else ()
    resume = (*base, "--resume", str(run_dir), *nproc) if command == "train" else None
    return TrialJob(trial.id, run_dir, run_dir.with_name(f"{trial.id}.log"), fresh, resume, threads, processes)
