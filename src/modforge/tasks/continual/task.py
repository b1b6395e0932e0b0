"""The ``continual`` task: chosen by a config's ``continual:`` section (or ``task: continual``).

It is classification in what it measures per sample (metrics ``accuracy``/``loss``, monitor
``val_accuracy``), but it owns its run: the dataset's task sequence is trained one task after
another by the configured algorithm (:mod:`.run`), and ``modforge test`` reports class-IL and
task-IL accuracy on every task trained so far. An exported artifact holds only the model, so
a method that classifies another way (iCaRL's nearest mean of exemplars) is refused at export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.errors import UsageError
from ...core.registries import ALGORITHMS, register_task
from ..base import RunRoutines, Task
from .settings import ContinualSettings, continual_settings

__all__ = ["ContinualSettings", "ContinualTask", "continual_settings"]


@register_task("continual")
class ContinualTask(Task):
    """A task sequence trained with a continual-learning algorithm (see the module doc)."""

    name = "continual"
    section = "continual"
    folds_refusal = "it trains its dataset's own task sequence, which cannot be pooled and re-split into folds"

    def check_config(self, cfg: Any) -> None:
        continual_settings(cfg)  # unknown keys and bad values fail here, before data or model exist

    def run(self, routines: RunRoutines, cfg: Any, run_dir: Path, **options: Any) -> dict[str, Any]:
        """:func:`.run.continual_run`: the task sequence trained by the algorithm (``options``:
        :meth:`Task.run`'s ``resume``, ``splits``, ``restart``)."""
        from .run import continual_run

        return continual_run(routines, cfg, run_dir, **options)

    def evaluate(
        self, exp: Any, checkpoint: dict[str, Any], split: str, *, out_dir: Path | None, stem: str, what: str
    ) -> dict[str, Any]:
        from .run import evaluate_continual

        if not getattr(exp.splits, "tasks", None) or "epoch" not in checkpoint:
            # not a task sequence, or weights that were never trained here (a config's model.init): no task
            # has been learned to report on, so the split is evaluated as one classification set
            return super().evaluate(exp, checkpoint, split, out_dir=out_dir, stem=stem, what=what)
        return {split: evaluate_continual(exp, checkpoint, split)}

    def check_export(self, exp: Any) -> None:
        """An artifact reproduces the model's logits; a method that classifies another way
        (iCaRL: nearest mean of exemplars) would be exported as a different, worse classifier."""
        from ...continual.algorithms.base import Algorithm

        cfg = exp.cfg
        spec = (cfg.data.get("continual") or {}).get("algorithm") or "sgd"
        name = spec if isinstance(spec, str) else spec.get("type", "sgd")
        algorithm, _ = ALGORITHMS.resolve(str(name), allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir),
                                          path="continual.algorithm", source=cfg.where("continual.algorithm"))
        if getattr(algorithm, "class_scores", Algorithm.class_scores) is not Algorithm.class_scores:
            raise UsageError(
                f"this continual run's method '{name}' does not classify by the model's logits (it uses its own "
                "scores, e.g. the nearest mean of exemplars), and an artifact holds only the model: its predictions "
                "would differ from the run's. Evaluate the run with `modforge test RUN` instead"
            )
