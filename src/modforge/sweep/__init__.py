"""Sweeps: many ordinary runs of one config over settings and seeds, and their results table.

``modforge sweep SWEEP.yaml`` runs every trial as ``python -m modforge train CONFIG ...
--run-dir SWEEP_DIR/trials/<id>`` (so ``modforge test``, ``--resume`` and every other command
work on a trial), records them in ``SWEEP_DIR/trials.csv`` and ends with
``modforge sweep-report SWEEP_DIR``. This package sits above ``experiment`` and below ``cli``:
it drives runs through subprocesses and imports neither torch nor the training code.

The sweep file (YAML, safe loading, ``_base_`` allowed; paths relative to the file)::

    name: continual_table              # folder: runs/sweeps/<name>/ (default: the file's stem)
    config: ../continual/base.yaml     # the base config
    command: train                     # or test: evaluate a config's model.init weights
    overrides:                         # fixed for every trial: KEY.PATH or --flag → value
      continual.epochs_per_task: 5
    grid:                              # the product of the axes is taken
      train.optimizer.args.lr: [0.01, 0.05]      # an axis over one key
      algorithm:                                  # an axis of named values, each setting several things
        sgd: {--algorithm: sgd}
        er: {--algorithm: er, --buffer-size: 200}
    random:                            # draws × grid points (reproducible from seed)
      trials: 8
      seed: 0
      space:
        train.optimizer.args.weight_decay: {loguniform: [1.0e-5, 1.0e-2]}
        --dropout: {uniform: [0.0, 0.5]}          # also int: [lo, hi] and choice: [a, b, c]
    seeds: [0, 1, 2]                   # every point with every seed (--seed)
    collect:                           # paths into the run's summary.json, or seconds
      - {name: class_il.average_accuracy, label: class-IL, scale: 100, decimals: 1, goal: max}
      - {name: seconds, label: run time (s), agg: median, decimals: 1}
    report: {title: ..., description: ...}

A named grid value may also set ``config:`` (a system per config file) and ``command:``.
See ``configs/sweeps/reference.yaml`` for every key with comments.

Seams for other searches and backends:

* :class:`~.search.Search` (``ask() -> Trial | None``, ``tell(trial, result)``), registered
  in :data:`~.search.SEARCHES` by the name a sweep file gives as ``search:`` — ``grid``,
  ``random`` and ``optuna`` (:mod:`.optuna_search`: TPE, pruning, a study in the sweep folder);
* :class:`~.executor.Executor` (``free``, ``running``, ``submit(job)``, ``wait(timeout)``,
  ``shutdown``), registered in :data:`~.executor.EXECUTORS` by the ``--backend`` name —
  ``local`` (:mod:`.local`) and ``ray`` (:mod:`.ray_executor`: one Ray task per trial); every
  executor runs :meth:`~.command.TrialJob.argv`, the one place a trial's command is made.
"""

from __future__ import annotations

from . import local as _local  # noqa: F401 - registers the "local" executor
from . import optuna_search as _optuna_search  # noqa: F401 - registers "optuna" (optuna imported on use)
from . import ray_executor as _ray_executor  # noqa: F401 - registers "ray" (ray imported on use)
from .command import TrialJob, build_job
from .driver import SweepResult, run_sweep
from .executor import EXECUTORS, Executor, ExecutorOptions, TrialOutcome, register_executor
from .report import NOTES_MARKER, build_report, write_report
from .search import SEARCHES, Search, TrialResult, register_search
from .spec import SweepSpec, SweepSpecError, load_sweep
from .trial import Trial

__all__ = [
    "EXECUTORS",
    "NOTES_MARKER",
    "SEARCHES",
    "Executor",
    "ExecutorOptions",
    "Search",
    "SweepResult",
    "SweepSpec",
    "SweepSpecError",
    "Trial",
    "TrialJob",
    "TrialOutcome",
    "TrialResult",
    "build_job",
    "build_report",
    "load_sweep",
    "register_executor",
    "register_search",
    "run_sweep",
    "write_report",
]
