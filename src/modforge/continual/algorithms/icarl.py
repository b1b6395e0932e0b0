"""``icarl`` — Incremental Classifier and Representation Learning (Rebuffi et al., CVPR 2017).

* **Exemplars by herding**: at the end of each task the memory (``buffer_size`` in all) is
  split evenly over the classes seen; old classes keep the first exemplars of their
  herding order, the new classes' exemplars are chosen by herding on normalised features.
* **Training**: sigmoid (binary cross-entropy) outputs over the classes seen; the current
  batch is joined with a minibatch of exemplars, the new classes' targets are the one-hot
  labels and the old classes' targets are the sigmoid outputs of the model frozen at the
  end of the last task (distillation), as in the paper and Mammoth's implementation.
  Mammoth adds the exemplars to the task's dataset; modforge replays a minibatch of them
  each step (``minibatch_size``), so the exemplars weigh the same whatever the task size.
* **Classification**: nearest mean of exemplars — a sample goes to the class whose mean
  normalised exemplar feature (re-normalised) is closest to its own normalised feature.
  :meth:`ICaRL.class_scores` is what the continual evaluation reads.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ...core.constraints import PositiveInt
from ...core.registries import register_algorithm
from ..exemplars import ExemplarMemory
from .exemplar_base import ExemplarAlgorithm
from .passes import in_chunks

__all__ = ["ICaRL"]

_FEATURE_BATCH = 256  # exemplars per forward pass when their features are recomputed


@register_algorithm("icarl")
class ICaRL(ExemplarAlgorithm):
    """iCaRL.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        buffer_size: the total number of exemplars kept over all classes.
        minibatch_size: how many exemplars are replayed per step (None: the batch size).
        seed: seeds the draws of exemplars (wired from the config's seed).
    """

    weight_average = (  # why train.ema cannot evaluate it
        "it classifies by exemplar means computed from the trained weights' features"
    )

    name = "icarl"

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        buffer_size: PositiveInt = 200,
        minibatch_size: PositiveInt | None = None,
        seed: int = 0,
    ):
        super().__init__(model, num_classes, ExemplarMemory(buffer_size, seed), minibatch_size)
        self.mean_classes: list[int] = []  # the classes of class_means' rows
        self.class_means: torch.Tensor | None = None  # [classes, D], unit rows

    # --------------------------------------------------------- task boundaries
    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        if trainer is None or loader is None:
            raise ValueError("icarl.end_task needs the trainer and the task's training loader (to choose exemplars)")
        self.teacher.freeze()
        self.old_classes = list(self.seen_classes)
        data = trainer.collect(loader, ("input", "features", "label"))
        self.add_exemplars(data, F.normalize(data["features"], dim=1))
        self.update_class_means(trainer)

    def update_class_means(self, trainer: Any) -> None:
        """Each class's mean normalised exemplar feature, re-normalised (the model as it is now)."""
        exemplars = self.memory.all()
        features = F.normalize(trainer.collect(in_chunks(exemplars, _FEATURE_BATCH), ("features",))["features"], dim=1)
        self.mean_classes = sorted(self.memory.exemplars)
        means = [features[exemplars["label"] == c].mean(0) for c in self.mean_classes]
        self.class_means = F.normalize(torch.stack(means), dim=1)

    # ------------------------------------------------------------------- step
    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        data = self.with_exemplars(batch)
        logits = trainer.forward({"input": data["input"]})["logits"]
        targets = F.one_hot(data["label"], logits.shape[1]).to(logits.dtype)
        if self.teacher and self.old_classes:
            old = torch.as_tensor(self.old_classes, device=logits.device)
            teacher = self.teacher({"input": data["input"]})["logits"].to(logits.dtype)
            targets[:, old] = torch.sigmoid(teacher.index_select(1, old))
        seen = torch.as_tensor(self.seen_classes, device=logits.device)
        return F.binary_cross_entropy_with_logits(logits.index_select(1, seen), targets.index_select(1, seen))

    # ------------------------------------------------------------- evaluation
    def class_scores(self, trainer: Any, loader: Any) -> dict[str, torch.Tensor]:
        """Nearest mean of exemplars: ``−‖f − μ_c‖²`` on unit vectors for classes with
        exemplars, ``−inf`` for the rest (the logits before the first task ends)."""
        if self.class_means is None:
            return super().class_scores(trainer, loader)
        out = trainer.collect(loader, ("features", "logits", "label"))
        features = F.normalize(out["features"], dim=1)
        scores = torch.full_like(out["logits"], float("-inf"))
        scores[:, self.mean_classes] = -(torch.cdist(features, self.class_means.to(features)) ** 2)
        return {"scores": scores, "label": out["label"]}

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "mean_classes": list(self.mean_classes), "class_means": self.class_means}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.mean_classes = [int(c) for c in state.get("mean_classes", [])]
        self.class_means = state.get("class_means")
