"""``train.distill``: knowledge distillation as a run extension — the teacher found and built
(:mod:`.teacher`), then the terms of :class:`~modforge.train.distill.TeacherDistillation`.

The teacher is loaded when the trainer is set up, not when the experiment is built: evaluating,
exporting or predicting with a distilled run never reads its teacher.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ConfigError
from ..core.registries import register_extension
from ..data.base import collate
from ..train.distill import TeacherDistillation
from ..train.extension import RunContext
from ..train.trainer import Trainer
from .teacher import load_teacher

__all__ = ["Distillation"]


@register_extension("distill")
class Distillation(TeacherDistillation):
    """Train the model against a frozen teacher: Hinton's temperature-scaled logit term and
    FitNets-style feature terms, beside the model's own loss (:mod:`modforge.train.distill`).

    Args:
        teacher: the teacher — a run folder or a checkpoint (its stored config builds it, with its
            weight average when it kept one), or a config file (its ``model.init`` weights).
        temperature: T of the logit term (> 0).
        logit_weight: weight of the logit term (0: features only).
        task_weight: weight of the student's own loss.
        features: mimicking terms, ``[{student: backbone.layer3, teacher: backbone.layer3, weight: 1.0}]``.
    """

    def setup(self, trainer: Trainer, context: RunContext | None) -> None:
        """The teacher built on the run's data (a resumed run's checked against the fingerprint its
        checkpoint recorded before anything of it is built), and the terms sized on a batch."""
        if context is None or context.config is None:
            raise ConfigError("train.distill builds its teacher from a run's config: train through modforge's runner "
                              "(or call attach_teacher with a teacher module)", path="train.distill")  # fmt: skip
        cfg = context.config
        recorded = (context.resume or {}).get("distill_teacher")
        teacher, fingerprint, path = load_teacher(cfg, context.splits, expected=recorded)
        # the run's config.yaml names the teacher absolutely: a resumed run reads its config from its own folder
        cfg.data["train"]["distill"]["teacher"] = str(path)
        trainer.config = cfg.to_dict()  # what its checkpoints store
        self.attach_teacher(trainer, teacher, _example(context.train_loader), fingerprint)


def _example(train_loader: Any) -> dict[str, Any]:
    """The first one or two training samples as a batch, read directly (not through the sampler: no
    random draw changes the data order)."""
    dataset = train_loader.dataset
    if len(dataset) == 0:
        raise ConfigError("the training split is empty: no batch to size the distillation with", path="data")
    first = [0, 1] if len(dataset) > 1 else [0]
    getitems = getattr(dataset, "__getitems__", None)  # a dataset that collates its own batches (COCO)
    return getitems(first) if callable(getitems) else collate([dataset[i] for i in first])
