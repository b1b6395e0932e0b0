"""What a run trains for: a task picks default metrics and monitor, asks the model for the
outputs it needs, and writes the test report.

``task:`` in a config names one (default: what the dataset says — the spoofing datasets
say ``spoofing``, the ``coco`` dataset ``detection`` — else ``classification``). Tasks are a
registry kind like every part: a plug-in adds one with ``@mf.register_task("name")`` on a
:class:`Task` subclass (``modforge list task``):

================  ======================================  =====================================
task              defaults                                ``modforge test`` / the final test
================  ======================================  =====================================
classification    metrics accuracy, loss; monitor          the configured metrics on the split
                  ``val_accuracy``
spoofing          metrics eer, min_dcf, accuracy, loss;    a score file (``utt_id score label
                  monitor ``val_eer``; the model adds a    attack``), EER/minDCF/actDCF/Cllr over
                  detection ``score``                      files and per attack, ``det.png``
detection         metrics coco_map, loss; monitor          COCO AP (pycocotools) overall, per
                  ``val_map``; the head writes             size and per class; detections.json,
                  ``dt_bboxes``                            ``detections.png``, ``pr.png``
continual         chosen by a ``continual:`` section;      class-IL and task-IL accuracy on
                  trains a task sequence with its          every task trained so far; the run
                  algorithm (its own run routine)          writes both matrices, ``cl_matrix.png``
================  ======================================  =====================================

The contract — what a task decides, each with a default that a subclass overrides:

* **metrics and monitor**: ``default_metrics`` (when ``train.metrics`` is not given) and
  ``monitor_preference`` (the first of them the metrics log becomes ``val_<name>``);
* **what the model must output**: ``model_options`` (extra :func:`modforge.build_model`
  arguments: the spoofing task asks for a detection ``score``); a detector's head writes
  ``dt_bboxes`` itself;
* **how batches are collated**: the task's datasets — a dataset whose ``__getitems__``
  returns a whole batch is used as is by every loader (the detection datasets pad images of
  different sizes and keep per-image targets); others go through torch's default collate;
* **its config section**: ``section`` names a top-level key the task owns (``continual:``);
  a config that has it runs this task, and :meth:`Task.check_config` checks it before
  anything is built;
* **the run**: :meth:`Task.run` — by default the runner's train-then-test routine; the
  continual task trains its task sequence instead;
* **the test report and its files**: :meth:`Task.test` (the run's final test and
  ``modforge test``) and :meth:`Task.evaluate` (a trained checkpoint on one split);
* **export**: :meth:`Task.check_export` refuses an artifact that would not reproduce the
  run's predictions;
* **what ``modforge predict`` prints**: chosen by the artifact's stored ``task`` (class
  probabilities, a spoofing score, boxes as JSON lines — :mod:`modforge.cli.commands.predict`).

The run routines come from the ``experiment`` layer as a :class:`RunRoutines` value, so a
task (which sits below it) never imports the runner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..core.registries import TASKS, register_task

__all__ = ["TASKS", "RunRoutines", "Task", "get_task", "sectioned_tasks"]


@dataclasses.dataclass(frozen=True)
class RunRoutines:
    """What the runner lends a task's :meth:`Task.run` (the ``experiment`` layer fills it in).

    Attributes:
        fit_and_test: the standard run — ``(cfg, run_dir, *, resume, splits, restart) ->
            summary``: build, train, test ``best.pt``, write ``summary.json`` and ``curves.png``.
        build: ``(cfg, splits=None, *, init_weights=True) -> Experiment`` (data, model, metrics).
        open_run_folder: ``(cfg, run_dir, *, resumed, restart=False)`` — once all is built, make the
            folder (``config.yaml``, plug-in copies), or take up a resumed run's.
        require_a_loss: ``(exp)`` — refuse a model that cannot make a training loss.
        write_json: ``(path, data)`` — write a summary atomically.
        built: the experiment the runner built from the ``cfg`` it hands to :meth:`Task.run` (the
            task chose itself through it); None where a task's run is called otherwise.

    A task whose :meth:`Task.run` trains with its own loop calls ``trainer.end_run(summary)``
    once its summary and plots are written, as ``fit_and_test`` does, so the trackers
    (``wandb``, ``mlflow``) receive the finished run folder.
    """

    fit_and_test: Callable[..., dict[str, Any]]
    build: Callable[..., Any]
    open_run_folder: Callable[..., None]
    require_a_loss: Callable[..., None]
    write_json: Callable[..., None]
    built: Any = None


@register_task("classification")
class Task:
    """Base and the classification task.

    Attributes:
        name: the ``task:`` value.
        default_metrics: metric names used when ``train.metrics`` is not given.
        monitor_preference: metrics tried in order for the default monitor (``val_<name>``).
        model_options: extra :func:`modforge.build_model` arguments.
        section: a top-level config section this task owns; a config with it runs this task.
        folds_refusal: why ``modforge kfold`` cannot re-split this task's data (None: it can,
            when the dataset's splits pool and re-split by one label per sample).
    """

    name = "classification"
    default_metrics: tuple[str, ...] = ("accuracy", "loss")
    monitor_preference: tuple[str, ...] = ("accuracy", "loss")
    model_options: dict[str, Any] = {}
    section: str | None = None
    folds_refusal: str | None = None

    def check_config(self, cfg: Any) -> None:
        """Check the task's own config section before data or model exist (default: none).

        Raises:
            ConfigError: naming the key path and its source."""

    def run(
        self,
        routines: RunRoutines,
        cfg: Any,
        run_dir: Path,
        *,
        resume: dict[str, Any] | None = None,
        splits: Any = None,
        restart: bool = False,
    ) -> dict[str, Any]:
        """Train (or resume) a run of this task into ``run_dir`` and return its summary.
        The default is the runner's train-then-test routine."""
        return routines.fit_and_test(cfg, run_dir, resume=resume, splits=splits, restart=restart)

    def evaluate(
        self, exp: Any, checkpoint: dict[str, Any], split: str, *, out_dir: Path | None, stem: str, what: str
    ) -> dict[str, Any]:
        """``modforge test``: ``exp.model`` (holding ``checkpoint``'s weights) on one split, with
        this task's report (:meth:`test`; its files go to ``out_dir`` named after ``stem``).

        Raises:
            UsageError: the dataset has no such split (``what`` names the dataset's source).
        """
        from ..core.errors import UsageError
        from ..data.loader import make_loader

        dataset = {"test": exp.splits.test, "val": exp.splits.val, "train": exp.splits.train}[split]
        if dataset is None or len(dataset) == 0:
            raise UsageError(f"{what} has no {split} split")
        aware = getattr(exp, "scores_padded_batches", False)
        loader = make_loader(dataset, exp.loader, train=False, mask_aware=aware)
        trainer = exp.evaluator()  # the run's own class (its prepare_batch), precision and engine
        return self.test(trainer, loader, dataset, split=split, out_dir=out_dir, stem=stem)

    def check_export(self, exp: Any) -> None:
        """Refuse (``UsageError``) an export whose artifact — the model alone — would not
        reproduce the run's predictions (default: every model exports)."""

    def export_view(self, model: Any) -> tuple[Any, dict[str, Any]]:
        """What ``modforge export`` writes for ``model`` (in eval mode): the module the artifact
        holds and the metadata entries the artifact's user needs besides the common ones
        (default: the model itself, nothing more). A detector exports its decoded per-location
        outputs and records the post-processing ``modforge predict`` runs after the graph."""
        return model, {}

    def export_difference(self, got: Any, reference: Any, metadata: dict[str, Any]) -> tuple[float, float]:
        """``(max |Δ|, scale)`` of an artifact's outputs ``got`` against the eager view's
        ``reference`` on the export batch; the export is refused when ``max |Δ|`` exceeds the
        parity tolerance times ``max(1, scale)`` (default: over every output, on their largest
        magnitude)."""
        if got.shape != reference.shape:
            return float("inf"), float(reference.abs().max()) if reference.numel() else 0.0
        if reference.numel() == 0:
            return 0.0, 0.0
        return float((got - reference).abs().max()), float(reference.abs().max())

    def export_report(self, model: Any, batch: dict[str, Any], got: Any, metadata: dict[str, Any]) -> Any:
        """A task's own check of an exported artifact's outputs ``got`` against ``model`` on the
        export ``batch`` (reported, not enforced), or None (default). What it returns offers
        ``rows() -> list[tuple[str, str]]`` for the export command's table."""
        return None

    def test(self, trainer: Any, loader: Any, dataset: Any, *, split: str, out_dir: Path | None, stem: str) -> dict:
        """Evaluate ``loader`` and return ``{"<split>": {metric: value}, ...}`` for the summary;
        files (if any) go to ``out_dir`` named after ``stem``."""
        row = trainer.evaluate(loader, split)
        metrics = {k[len(split) + 1 :]: v for k, v in row.items()}
        extra = {k[len(split) + 1 :]: v for k, v in trainer.extra_results.items() if k.startswith(split + "_")}
        return {split: {**metrics, **extra}}


def sectioned_tasks(reserved: Iterable[str] = ()) -> dict[str, type[Task]]:
    """Every registered task that owns a config section, by section name.

    Raises:
        UsageError: two tasks claim one section, or a task claims one of the ``reserved``
            core sections (``model``, ``train``…) — a plug-in's mistake, named with both owners.
    """
    from ..core.errors import UsageError

    core = set(reserved)
    owned: dict[str, type[Task]] = {}
    for name in TASKS.list():
        task = TASKS.get(name)
        section = getattr(task, "section", None)
        if not section:
            continue
        if section in core:
            raise UsageError(f"task '{name}' claims the config section '{section}', which is modforge's own; "
                             "a task's section must be a new top-level key")  # fmt: skip
        if section in owned:
            other = next(n for n in TASKS.list() if TASKS.get(n) is owned[section])
            raise UsageError(f"tasks '{other}' and '{name}' both claim the config section '{section}'; "
                             "rename one task's section")  # fmt: skip
        owned[section] = task
    return owned


def get_task(name: str | None) -> Task:
    """The task called ``name`` (None: classification).

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    name = name or "classification"
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; one of {', '.join(TASKS.list())}")
    return TASKS.get(name)()
