"""Running a sweep: ask the search, skip finished trials, run the rest on an executor,
record every change in ``trials.csv``.

Re-running a sweep in the same folder continues it: a trial whose folder holds its
``summary.json`` is finished and never run again; an unfinished one (interrupted, killed,
failed) runs again — resumed from its checkpoint where it has one. A finished trial the
sweep file now sets differently is an error (its folder would no longer match its row).
Nothing here prints: progress goes to ``on_event``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ..core.config import display_path
from ..core.safe_files import ensure_folder, write_atomic
from .collect import collect_metrics, read_summary
from .command import TrialJob, build_job, user_tokens
from .executor import EXECUTORS, ExecutorOptions, TrialOutcome, default_threads, last_error_line
from .lock import SweepLock
from .search import SEARCHES, Search, TrialResult
from .spec import SweepSpec, SweepSpecError
from .table import TrialsTable
from .trial import Trial, format_value

__all__ = ["SweepResult", "default_threads", "param_columns", "run_sweep", "write_resolved"]

Event = Callable[[str, Trial, dict[str, str]], None]
"""``on_event(kind, trial, row)``: kind is ``started``, ``done``, ``pruned``, ``failed`` or
``skipped`` (finished before)."""

PRUNED = "pruned.json"
"""The file the ``optuna_pruning`` callback writes into a run folder when the study stops the
run early: the trial finished (its ``summary.json`` exists) but is ``pruned``, not ``done``."""


@dataclasses.dataclass
class SweepResult:
    """How a sweep ended: trials finished (this run and before; pruned ones included), pruned,
    failed, and finished before this run."""

    done: int = 0
    failed: int = 0
    skipped: int = 0
    pruned: int = 0

    @property
    def ok(self) -> bool:
        """Every trial succeeded."""
        return self.failed == 0


def param_columns(spec: SweepSpec) -> list[str]:
    """The parameter columns of ``trials.csv``: grid axes, then random (or optuna) keys."""
    space = spec.random.params if spec.random else spec.optuna.params if spec.optuna else ()
    return [axis.name for axis in spec.grid] + [p.key for p in space]


def write_resolved(spec: SweepSpec, sweep_dir: Path) -> None:
    """``sweep_dir/sweep.yaml``: the resolved sweep (config paths absolute), what the report reads."""
    header = f"# The resolved sweep of {display_path(spec.file)}, written by 'modforge sweep'.\n"
    text = header + yaml.safe_dump(spec.data, sort_keys=False, allow_unicode=True)
    write_atomic(sweep_dir / "sweep.yaml", text)


class _Run:
    """One invocation of a sweep (see :func:`run_sweep`)."""

    def __init__(self, spec: SweepSpec, sweep_dir: Path, search: Search, threads: int, on_event: Event | None,
                 processes: int = 1):  # fmt: skip
        self.spec, self.sweep_dir, self.search, self.threads = spec, sweep_dir, search, threads
        self.processes = processes
        self.on_event = on_event or (lambda *_: None)
        self.table = TrialsTable(sweep_dir, param_columns(spec), [c.name for c in spec.collect if c.name != "seconds"])
        self.jobs: dict[str, tuple[Trial, TrialJob]] = {}
        self.result = SweepResult()

    def row_values(self, trial: Trial) -> dict[str, Any]:
        values = {k: format_value(v) for k, v in trial.params.items() if k in self.table.params}
        return {**values, "seed": trial.seed, "overrides": " ".join(user_tokens(trial))}

    def check_same(self, trial: Trial, job: TrialJob) -> None:
        """Refuse a trial whose folder holds a run the sweep file now sets differently."""
        before = self.table.previous.get(trial.id, {}).get("overrides")
        now = " ".join(user_tokens(trial))
        if before and before != now and (job.run_dir.exists() or job.run_dir.is_symlink()):
            raise SweepSpecError(
                f"trial {trial.id} in {display_path(self.sweep_dir)} was run with '{before}', but the sweep file now "
                f"gives it '{now}'; nothing was changed. Use another --sweep-dir, or delete "
                f"{display_path(job.run_dir)} to run it again",
                source=display_path(self.spec.file),
            )

    def start(self, trial: Trial, executor) -> None:
        job = build_job(self.spec, trial, self.sweep_dir, self.threads, self.processes)
        self.check_same(trial, job)
        job.check()  # a link at the trial's folder: refused before anything is recorded
        self.table.set(trial.id, **self.row_values(trial))
        if job.finished():
            seconds = self.table.previous.get(trial.id, {}).get("seconds") or None
            self.finish(trial, job, float(seconds) if seconds else None, skipped=True)
            return
        self.table.set(trial.id, status="running", error="")
        self.table.write()
        executor.submit(job)
        self.jobs[trial.id] = (trial, job)
        self.on_event("started", trial, self.table.rows[trial.id])

    def finish(self, trial: Trial, job: TrialJob, seconds: float | None, *, skipped: bool = False,
               returncode: int = 0) -> None:  # fmt: skip
        summary = read_summary(job.run_dir) if job.finished() else {}
        metrics = collect_metrics(self.spec.collect, summary, seconds)
        if summary:
            status, error = ("pruned" if (job.run_dir / PRUNED).is_file() else "done"), ""
            self.result.done += 1
            self.result.pruned += status == "pruned"
            self.result.skipped += skipped
        else:
            status = "failed"
            error = last_error_line(job.log) if returncode else "the trial ended without writing summary.json"
            self.result.failed += 1
        values = {k: v for k, v in metrics.items() if k != "seconds"}  # seconds has its own column
        self.table.set(trial.id, status=status, error=error, seconds=None if seconds is None else round(seconds, 2),
                       **values)  # fmt: skip
        self.table.write()
        self.search.tell(trial, TrialResult(status, metrics, summary, job.run_dir))
        self.on_event("skipped" if skipped else status, trial, self.table.rows[trial.id])

    def ended(self, outcome: TrialOutcome) -> None:
        trial, job = self.jobs.pop(outcome.trial_id)
        self.finish(trial, job, outcome.seconds, returncode=outcome.returncode)

    def interrupted(self) -> None:
        for trial_id in self.jobs:
            self.table.set(trial_id, status="interrupted", error="the sweep was stopped; a re-run resumes it")
        self.table.write()


def run_sweep(
    spec: SweepSpec, sweep_dir: Path, *, workers: int | None = 1, backend: str = "local",
    settings: dict[str, Any] | None = None, on_event: Event | None = None, processes: int = 1,
) -> SweepResult:  # fmt: skip
    """Run (or continue) ``spec`` in ``sweep_dir`` with ``workers`` trials at once (``None``:
    as many as the backend holds) on ``backend``, given its ``settings`` (see
    :class:`~.executor.ExecutorOptions`); each training trial runs as ``processes`` processes
    (``--nproc``).

    Raises:
        SweepBusyError: another sweep (or a killed one's trials) holds the folder.
        SweepSpecError: an unknown search, or a finished trial the sweep file now sets differently.
    """
    if spec.search not in SEARCHES:
        raise SweepSpecError(f"unknown search '{spec.search}' (known: {', '.join(sorted(SEARCHES))})",
                             path="search", source=display_path(spec.file))  # fmt: skip
    ensure_folder(sweep_dir, named=True)
    ensure_folder(sweep_dir / "trials")
    with SweepLock(sweep_dir) as lock:
        search = SEARCHES[spec.search](spec, sweep_dir)
        executor = EXECUTORS[backend](ExecutorOptions(workers=workers, keep_fds=(lock.fd,), settings=settings or {}))
        threads = getattr(executor, "threads", None) or default_threads(workers or 1)
        run = _Run(spec, sweep_dir, search, threads, on_event, processes)
        for trial in getattr(search, "trials", None) or ():  # a search that knows its trials: refuse before any starts
            job = build_job(spec, trial, sweep_dir, threads, processes)
            run.check_same(trial, job)
            job.check()
        write_resolved(spec, sweep_dir)  # only once the sweep file is known to fit the folder
        try:
            while True:
                while executor.free() > 0:
                    trial = run.search.ask()
                    if trial is None:
                        break
                    run.start(trial, executor)
                if executor.running() == 0 and not run.jobs:
                    break
                for outcome in executor.wait(1.0):
                    run.ended(outcome)
        except BaseException:
            executor.shutdown()
            run.interrupted()
            raise
        executor.shutdown()  # nothing runs: lets a backend release what it holds (a Ray instance)
        run.table.write()
    return run.result
