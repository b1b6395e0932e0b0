"""The one place a trial's command line is made — every executor (the local process pool,
a Ray task) runs what :meth:`TrialJob.argv` returns, on the machine that runs the trial.

A trial is ``python -P -m modforge train CONFIG [overrides ...] --seed S --run-dir TRIAL_DIR``;
where the trial's folder already holds a checkpoint (a sweep, or a worker, killed part-way),
it is ``python -P -m modforge train --resume TRIAL_DIR`` instead — modforge's resume continues
bit for bit, so the result equals an uninterrupted trial's. A folder an earlier attempt left
without any checkpoint holds nothing worth keeping and is emptied first — only when it is a
real folder (never a link) holding nothing but what a modforge run writes.

``-P`` (Python 3.11+; a small bootstrap that drops ``sys.path[0]`` on 3.10) keeps the
current directory off ``sys.path``: a ``yaml.py`` or ``torch.py`` lying where the sweep was
started is never imported by a trial.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import shlex
import stat
from pathlib import Path, PurePath
from typing import Any

from ..core.child_process import safe_module_command
from ..core.safe_files import UnsafePathError, inside, remove_tree
from .spec import AUTO_KEYS, SweepSpec
from .trial import Trial

__all__ = ["TrialJob", "build_job", "modforge_command", "override_tokens", "run_wrote", "user_tokens"]

SUMMARY = "summary.json"

def modforge_command(executable: str | None = None) -> list[str]:
    """``python -P -m modforge``: a child modforge process that never imports from the cwd
    (:func:`~modforge.core.child_process.safe_module_command`). Executors also set
    ``PYTHONSAFEPATH=1`` in the child's environment (for its own children)."""
    return safe_module_command("modforge", executable=executable)


_RUN_FILES = ("*.yaml", "*.csv", "*.json", "*.png", "*.txt", "*.log", "events.*")  # config, metrics, summary,
# plots, scores.txt, detections.json, a csv_logger filename of the run's own, TensorBoard's events
_RUN_FOLDERS = ("checkpoints", "evaluations", "plugins", "exports", "mlruns", "wandb")
_NESTED_FILES = ("events.out.tfevents.*", "*.csv")  # TensorBoard under a subdir; a csv_logger filename in a folder


def run_wrote(relative: PurePath) -> bool:
    """Whether the file ``relative`` (a path inside a run folder) is something a modforge run
    writes: its top-level files (config, metrics, summary, plots, scores, detections, markers,
    tracker event files), hidden temporaries, whatever lies in its own sub-folders
    (checkpoints, evaluations, signed plug-in copies, exports, local tracker stores), and
    TensorBoard events or a metrics CSV in a sub-folder the run's config named."""
    parts = relative.parts
    if not parts:
        return False
    if parts[0] in _RUN_FOLDERS:
        return True
    name = parts[-1]
    if len(parts) > 1:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in _NESTED_FILES)
    return name.startswith(".") or any(fnmatch.fnmatchcase(name, pattern) for pattern in _RUN_FILES)


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

    def check(self) -> bool:
        """Whether the trial's folder exists; it must be a real folder, never a link (a planted
        ``trials/<id> -> ~/thesis`` is neither trained into nor emptied).

        Raises:
            UnsafePathError: the trial's folder (or its ``checkpoints``) is a link or not a folder.
        """
        for path in (self.run_dir, self.run_dir / "checkpoints"):
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                return path != self.run_dir
            if not stat.S_ISDIR(mode):
                raise UnsafePathError(f"trial folder {path} is {'a symbolic link' if stat.S_ISLNK(mode) else 'not a folder'}"
                                      "; modforge runs trials only in real folders it made, nothing was changed "
                                      "(remove it, or choose another --sweep-dir)")  # fmt: skip
        return True

    def finished(self) -> bool:
        """Whether the trial's run folder holds its ``summary.json`` (written when a run completes):
        a real folder holding a regular file (a link there counts as unfinished and is refused
        when the trial runs)."""
        try:
            folder, summary = os.lstat(self.run_dir).st_mode, os.lstat(self.run_dir / SUMMARY).st_mode
        except OSError:
            return False
        return stat.S_ISDIR(folder) and stat.S_ISREG(summary)

    def argv(self) -> list[str]:
        """The command to run now, decided from the folder as it is: resume from a checkpoint,
        or start afresh (emptying a folder an earlier attempt left without checkpoints — only
        when it holds nothing but what a modforge run writes).

        Raises:
            UnsafePathError: the folder is a link, or holds something a run does not write.
        """
        if self.check():
            checkpoints = self.run_dir / "checkpoints"
            if os.path.isdir(checkpoints) and any(name.endswith(".pt") for name in os.listdir(checkpoints)):
                if self.resume is not None:
                    return list(self.resume)
            remove_tree(self.run_dir, self.run_dir.parent, run_wrote, what=f"trial {self.trial_id}'s folder")
        return list(self.fresh)

    def shown(self) -> str:
        """The fresh command as a shell line (for ``--dry-run`` and logs)."""
        return shlex.join(self.fresh)


def build_job(spec: SweepSpec, trial: Trial, sweep_dir: Path, threads: int, processes: int = 1) -> TrialJob:
    """The :class:`TrialJob` of ``trial`` in ``sweep_dir``, with ``threads`` torch threads
    (``train.num_threads``, unless the sweep file sets it), ``train.progress=never`` (unless
    set: the log gets lines, not a progress bar) and the search's own overrides
    (:attr:`Trial.extra`); with ``processes`` > 1 (``modforge sweep --nproc N``, the user's own
    command line — never a sweep file) a training trial runs as N processes under torchrun.
    A resumed trial keeps its ``--nproc`` and gets the search's own
    overrides again (a stored config's study storage is not re-activated by itself); the rest
    is in its saved config."""
    trials = Path(os.path.abspath(sweep_dir)).resolve() / "trials"  # the sweep folder once; never the trial's own
    run_dir = inside(trials, trial.id, what="trial id")  # folder, which may be a planted link
    command = trial.overrides.get("command", spec.command)
    config = trial.overrides.get("config") or str(spec.config)
    auto = dict(zip(AUTO_KEYS, (threads, "never"), strict=True))
    extra = [f"{k}={v}" for k, v in auto.items() if k not in spec.setting_keys()] + override_tokens(trial.extra)
    base = [*modforge_command(), command]
    nproc = ("--nproc", str(processes)) if processes > 1 and command == "train" else ()
    processes = processes if nproc else 1
    fresh = (*base, config, *user_tokens(trial), *extra, "--run-dir", str(run_dir), *nproc)
    # the search's own callbacks again: a resumed run's stored config never re-activates a destination by itself
    resume = (*base, "--resume", str(run_dir), *nproc, *override_tokens(trial.extra)) if command == "train" else None
    return TrialJob(trial.id, run_dir, run_dir.with_name(f"{trial.id}.log"), fresh, resume, threads, processes)
