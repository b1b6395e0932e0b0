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
================  ======================================  =====================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.registries import TASKS, register_task

__all__ = ["TASKS", "Task", "get_task"]


@register_task("classification")
class Task:
    """Base and the classification task.

    Attributes:
        name: the ``task:`` value.
        default_metrics: metric names used when ``train.metrics`` is not given.
        monitor_preference: metrics tried in order for the default monitor (``val_<name>``).
        model_options: extra :func:`modforge.build_model` arguments.
    """

    name = "classification"
    default_metrics: tuple[str, ...] = ("accuracy", "loss")
    monitor_preference: tuple[str, ...] = ("accuracy", "loss")
    model_options: dict[str, Any] = {}

    def test(self, trainer: Any, loader: Any, dataset: Any, *, split: str, out_dir: Path | None, stem: str) -> dict:
        """Evaluate ``loader`` and return ``{"<split>": {metric: value}, ...}`` for the summary;
        files (if any) go to ``out_dir`` named after ``stem``."""
        row = trainer.evaluate(loader, split)
        metrics = {k[len(split) + 1 :]: v for k, v in row.items()}
        extra = {k[len(split) + 1 :]: v for k, v in trainer.extra_results.items() if k.startswith(split + "_")}
        return {split: {**metrics, **extra}}


def get_task(name: str | None) -> Task:
    """The task called ``name`` (None: classification).

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    name = name or "classification"
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; one of {', '.join(TASKS.list())}")
    return TASKS.get(name)()
