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

from ...core.arguments import signature_of
from ...core.errors import ConfigError, UsageError
from ...core.registries import ALGORITHMS, register_task
from ..base import RunRoutines, Task

__all__ = ["ContinualSettings", "ContinualTask", "continual_settings"]


class ContinualSettings:
    """The ``continual:`` section.

    Args:
        algorithm: the method (an algorithm spec: ``der`` or ``{type: der, args: {alpha: 0.3}}``).
        epochs_per_task: training epochs on each task.
        online: one pass over the stream: every training sample is seen once (epochs_per_task must
            be 1; the stream batch is data.batch_size, a replay method's own batch its minibatch_size);
            the samples each task trained on are counted in the summary.
        blurry: the fraction of each task's training samples moved to a neighbouring task (previous
            or next, seeded): blurry task boundaries (0: clean boundaries).
        eval_every: anytime accuracy: every N optimizer steps, the accuracy on every task seen so far
            (class-IL and task-IL), recorded with the step and plotted (``cl_anytime.png``); None: off.
        forward_transfer: evaluate the untrained model on every task and each next task before it
            is trained, for the forward-transfer figure (one evaluation per task more).
    """

    def __init__(
        self,
        algorithm: Any = "sgd",
        epochs_per_task: int = 1,
        online: bool = False,
        blurry: float = 0.0,
        eval_every: int | None = None,
        forward_transfer: bool = True,
    ):
        if epochs_per_task < 1:
            raise ValueError(f"epochs_per_task must be at least 1, got {epochs_per_task}")
        if online and epochs_per_task != 1:
            raise ValueError(f"online: true sees every sample once: epochs_per_task must be 1, got {epochs_per_task}")
        if not 0.0 <= blurry < 1.0:
            raise ValueError(f"blurry must be a fraction in [0, 1), got {blurry}")
        if eval_every is not None and eval_every < 1:
            raise ValueError(f"eval_every must be a number of steps (>= 1) or null, got {eval_every}")
        self.algorithm = algorithm if isinstance(algorithm, dict) else {"type": str(algorithm), "args": {}}
        self.epochs_per_task = epochs_per_task
        self.online, self.blurry, self.eval_every = bool(online), float(blurry), eval_every
        self.forward_transfer = bool(forward_transfer)


def continual_settings(cfg: Any) -> ContinualSettings:
    """The config's ``continual:`` section, checked (unknown keys, types, ranges).

    Raises:
        ConfigError: naming ``continual.<key>`` and where it came from."""
    values = signature_of(ContinualSettings).validate(cfg.data.get("continual") or {}, path="continual",
                                                      origin_of=cfg.where)
    try:
        return ContinualSettings(**values)
    except ValueError as exc:
        raise ConfigError(str(exc), path="continual", source=cfg.where("continual")) from None


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
