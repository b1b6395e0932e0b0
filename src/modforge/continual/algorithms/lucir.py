"""``lucir`` — Learning a Unified Classifier Incrementally via Rebalancing (Hou et al., CVPR
2019), as Mammoth implements it (aimagelab/mammoth ``models/lucir.py``, commit
e75a491c69fd729edeb01431afb753d9157d9a81).

The model's head must be the registered ``cosine`` head (``logits = σ·cos(f, w_c)``, no bias,
learnable scale; Mammoth's ``CustomClassifier`` starts σ at 1: ``head: {type: cosine, args:
{scale: 1.0}}``).

* **Per-task classifier rows.** While task ``t`` trains, only its classes' rows of the head's
  weight (and σ) learn; every other row is put back after each optimizer step, as Mammoth's
  learning rate of 0 for the other tasks' weights. When a task ``t > 0`` starts (its first
  step), its rows are **imprinted** (``imprint_weights``): each new class's row is the
  normalised mean of its training samples' normalised features (eval mode), times the mean
  norm of the old classes' rows; without imprinting they are drawn again from
  ``U(−1/√D, 1/√D)``. The optimizer's state for those rows (momentum...) is cleared — Mammoth
  builds a new optimizer for each task.
* **Training.** The current batch joined with a minibatch of exemplars; the loss is the
  cross-entropy of the scaled cosine logits over every class (Mammoth's), plus from the second
  task on: **less-forget** ``λ·(1 − cos(f, f_old))`` (mean over the batch) between the features
  of the model and of the model frozen at the end of the last task, with
  ``λ = lamda_base·√(n_old / n_new)``, and the **margin ranking** loss ``lamda_mr ·
  mean(max(0, mr_margin − (cos_gt − cos_k)))`` for each sample of an old class against the
  ``k_mr`` highest cosines among the classes that are not old.
* **End of task.** The model is frozen as the teacher; the memory (``buffer_size`` in all,
  split evenly over the classes seen) keeps each old class's first exemplars and takes the
  new classes' by herding on their features; then **class-balanced finetuning**: for
  ``fitting_epochs`` passes over the shuffled memory (minibatches of the training batch size)
  the current task's rows and σ are trained with SGD (``lr_finetune``, the run's optimizer's
  momentum and weight decay, learning rate ×0.1 after 10 steps — Mammoth's ``MultiStepLR([10])``
  stepped per batch) on the cross-entropy plus the margin ranking loss, the backbone fixed
  (train mode, batch-norm statistics not updated, as Mammoth's ``bn_track_stats(False)``).

Differences from Mammoth, and why:

* Mammoth merges the exemplars into the task's dataset; modforge replays a minibatch of them
  each step (``minibatch_size``), as its iCaRL does.
* λ of less-forget is the paper's ``lamda_base·√(n_old/n_new)``; Mammoth sets
  ``lamda_base·√t`` at the end of task ``t``, so task 1 trains with λ = 0 and later ones lag
  one task behind the paper.
* Imprinting runs at the first step of the task (the trainer's ``train_loader`` holds the
  task's data then; ``begin_task`` does not see it).
* σ is the ``cosine`` head's scale, learnt as its logarithm (Mammoth learns σ itself): the same
  logits, a different parametrisation of the scale's gradient step.
* The less-forget term is left out of the finetuning loss: with the backbone fixed its
  gradient on the classifier is zero (Mammoth computes it, to no effect).
* Herding draws each exemplar once (Mammoth's may pick a sample twice).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ...components.heads.cosine import CosineHead
from ...core.constraints import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from ...core.registries import register_algorithm
from ..exemplars import ExemplarMemory
from .checks import at_least_one, check, non_negative, positive
from .exemplar_base import ExemplarAlgorithm
from .passes import batchnorm_statistics_frozen, loader_batch_size, training_mode

__all__ = ["LUCIR", "margin_ranking_loss"]

_FEATURE_BATCH = 256  # samples per forward pass when a task's features are computed
_FINETUNE_MILESTONES = [10]  # Mammoth's ft_lr_strat (steps, the scheduler steps every batch)


def margin_ranking_loss(
    cosines: torch.Tensor, labels: torch.Tensor, old_classes: list[int], k: int, margin: float
) -> torch.Tensor:
    """LUCIR's margin ranking loss: for every sample of an old class, its ground-truth cosine
    against each of the ``k`` largest cosines among the classes that are not old, ranked with
    ``margin`` (``mean(max(0, margin − (gt − other)))``); zero without such samples."""
    old = torch.zeros(cosines.shape[1], dtype=torch.bool, device=cosines.device)
    old[torch.as_tensor(old_classes, dtype=torch.long, device=cosines.device)] = True
    hard = old[labels]
    if not bool(hard.any()):
        return cosines.new_zeros(())
    rows = cosines[hard]
    gt = rows.gather(1, labels[hard].unsqueeze(1)).expand(-1, k)
    others = rows[:, ~old].topk(k, dim=1).values
    return F.margin_ranking_loss(gt.reshape(-1), others.reshape(-1), torch.ones_like(others.reshape(-1)),
                                 margin=margin)  # fmt: skip


def _cosine_head(model: torch.nn.Module) -> CosineHead:
    heads = [m for m in model.modules() if isinstance(m, CosineHead)]
    if len(heads) != 1:
        raise ValueError(
            "lucir needs a model whose classifier is the registered 'cosine' head "
            f"(model.head: {{type: cosine, args: {{scale: 1.0}}}}); this model has {len(heads)} cosine heads"
        )
    return heads[0]


@register_algorithm("lucir")
class LUCIR(ExemplarAlgorithm):
    """LUCIR (cosine classifier, less-forget distillation, margin ranking, imprinting and
    class-balanced finetuning).

    Args:
        model: the model (wired by the runner); its head must be ``cosine``.
        num_classes: number of classes (wired by the runner).
        buffer_size: the total number of exemplars kept over all classes.
        minibatch_size: how many exemplars are replayed per step (None: the batch size).
        lamda_base: base weight of the less-forget (feature cosine) distillation.
        lamda_mr: weight of the margin ranking loss.
        k_mr: how many of the highest non-old cosines each old-class sample is ranked against.
        mr_margin: the ranking margin.
        fitting_epochs: passes of class-balanced finetuning over the memory after each task (0: none).
        lr_finetune: the finetuning's learning rate.
        imprint_weights: start each new task's classifier rows from its classes' mean features.
        seed: seeds the draws of exemplars (wired from the config's seed).
    """

    weight_average = (  # why train.ema cannot evaluate it
        "it imprints the new classes' weights at each task start, outside the optimizer steps the average "
        "follows"
    )

    distributed = (  # why it trains in one process only
        "its margin-ranking term is averaged over the old-class samples each batch happens to hold (a "
        "process's share would weigh them differently) and it imprints the new classes' weights from the "
        "task's training loader, which a process holds a shard of"
    )

    name = "lucir"

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        buffer_size: PositiveInt = 200,
        minibatch_size: PositiveInt | None = None,
        lamda_base: NonNegativeFloat = 5.0,
        lamda_mr: NonNegativeFloat = 1.0,
        k_mr: PositiveInt = 2,
        mr_margin: NonNegativeFloat = 0.5,
        fitting_epochs: NonNegativeInt = 20,
        lr_finetune: PositiveFloat = 0.01,
        imprint_weights: bool = True,
        seed: int = 0,
    ):
        super().__init__(model, num_classes, ExemplarMemory(buffer_size, seed), minibatch_size)
        check(
            non_negative("lamda_base", lamda_base),
            non_negative("lamda_mr", lamda_mr),
            non_negative("mr_margin", mr_margin),
            at_least_one("k_mr", k_mr),
            non_negative("fitting_epochs", fitting_epochs),
            positive("lr_finetune", lr_finetune),
        )
        self.head = _cosine_head(model)
        self.lamda_base, self.lamda_mr = float(lamda_base), float(lamda_mr)
        self.k_mr, self.mr_margin = int(k_mr), float(mr_margin)
        self.fitting_epochs, self.lr_finetune = int(fitting_epochs), float(lr_finetune)
        self.imprint_weights = bool(imprint_weights)
        self.prepared_task = -1  # the task whose rows are imprinted and whose other rows are held
        self.frozen: torch.Tensor | None = None  # the head's weight when the task's rows were prepared

    # --------------------------------------------------------- task boundaries
    def begin_task(self, task: int, trainer: Any = None, classes: Any = ()) -> None:
        super().begin_task(task, trainer, classes)
        others = self.head.weight.shape[0] - len(self.old_classes)
        if self.old_classes and self.k_mr > others:
            raise ValueError(f"k_mr ({self.k_mr}) exceeds the {others} classes that are not old at task {task}")

    @property
    def lamda_cos_sim(self) -> float:
        """The less-forget weight ``lamda_base·√(n_old/n_new)`` (0 on the first task)."""
        if not self.old_classes or not self.new_classes:
            return 0.0
        return self.lamda_base * math.sqrt(len(self.old_classes) / len(self.new_classes))

    def prepare_task(self, trainer: Any) -> None:
        """The task's first step: new rows imprinted (or drawn again), their optimizer state
        cleared, and the weight as it is now kept to hold the other rows."""
        weight = self.head.weight
        if self.old_classes and self.new_classes:
            rows = torch.as_tensor(self.new_classes, dtype=torch.long, device=weight.device)
            with torch.no_grad():
                if self.imprint_weights:
                    weight[rows] = self.imprinted(trainer).to(weight)
                else:  # Mammoth's reset_weight: U(-1/√D, 1/√D), drawn from the memory's seeded generator
                    bound = 1.0 / math.sqrt(weight.shape[1])
                    drawn = torch.rand(len(rows), weight.shape[1], generator=self.memory.generator)
                    weight[rows] = ((drawn * 2 - 1) * bound).to(weight)
            optimizer = getattr(trainer, "optimizer", None)
            moments = optimizer.state.get(weight, {}) if optimizer is not None else {}
            for value in moments.values():
                if isinstance(value, torch.Tensor) and value.shape == weight.shape:
                    value[rows] = 0
        self.frozen = weight.detach().clone()
        self.prepared_task = self.task

    def imprinted(self, trainer: Any) -> torch.Tensor:
        """Rows for the new classes: each class's normalised mean of normalised features on the
        task's training data, times the mean norm of the old classes' rows."""
        loader = getattr(trainer, "train_loader", None)
        if loader is None:
            raise ValueError("lucir imprints the new classes' weights from the task's training data: the trainer "
                             "has no train_loader (train through ContinualTrainer.fit, or imprint_weights=False)")  # fmt: skip
        size = getattr(loader, "batch_size", None) or _FEATURE_BATCH
        collate = getattr(loader, "collate_fn", None)
        ordered = torch.utils.data.DataLoader(loader.dataset, batch_size=size, shuffle=False, collate_fn=collate)
        out = trainer.collect(ordered, ("features", "label"))
        return self.imprint(out["features"], out["label"])

    def imprint(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The imprinted rows of :attr:`new_classes` from ``features`` [N, D] and ``labels``."""
        weight = self.head.weight.detach()
        old = torch.as_tensor(self.old_classes, dtype=torch.long, device=weight.device)
        norm = weight[old].norm(dim=1).double().mean().float().cpu()
        rows = weight[torch.as_tensor(self.new_classes, dtype=torch.long, device=weight.device)].cpu().clone()
        features, labels = F.normalize(features.float().cpu(), dim=1), labels.cpu()
        for i, c in enumerate(self.new_classes):
            mine = features[labels == c]
            if len(mine):
                rows[i] = F.normalize(mine.mean(0), dim=0) * norm
        return rows

    # ------------------------------------------------------------------- step
    def cosines(self, features: torch.Tensor) -> torch.Tensor:
        """The head's cosines before its scale."""
        return F.linear(F.normalize(features, dim=1), F.normalize(self.head.weight, dim=1))

    def lucir_loss(self, logits: torch.Tensor, features: torch.Tensor, labels: torch.Tensor,
                   inputs: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
        """Cross-entropy over every class, plus less-forget (when ``inputs`` are given, with a
        teacher) and margin ranking once there are old classes."""
        loss = F.cross_entropy(logits.float(), labels)
        if not self.old_classes:
            return loss
        if inputs is not None and self.teacher and self.lamda_cos_sim > 0:
            old_features = self.teacher({"input": inputs})["features"].reshape(len(inputs), -1).to(features.dtype)
            flat = features.reshape(len(features), -1)
            loss = loss + self.lamda_cos_sim * F.cosine_embedding_loss(flat, old_features, torch.ones_like(labels))
        if self.lamda_mr > 0:
            ranking = margin_ranking_loss(self.cosines(features.float()), labels, self.old_classes, self.k_mr,
                                          self.mr_margin)  # fmt: skip
            loss = loss + self.lamda_mr * ranking
        return loss

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        if self.prepared_task != self.task:
            self.prepare_task(trainer)
        data = self.with_exemplars(batch)
        out = trainer.forward({"input": data["input"]})
        return self.lucir_loss(out["logits"], out["features"], data["label"], data["input"])

    def after_step(self, trainer: Any) -> None:
        self.hold_rows()

    def hold_rows(self) -> None:
        """Put back every row of the head's weight but the current task's."""
        if self.frozen is None:
            return
        weight = self.head.weight
        held = torch.ones(weight.shape[0], dtype=torch.bool, device=weight.device)
        if self.new_classes:
            held[torch.as_tensor(self.new_classes, dtype=torch.long, device=weight.device)] = False
        with torch.no_grad():
            weight[held] = self.frozen.to(weight)[held]

    # ---------------------------------------------------------- end of task
    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        if trainer is None or loader is None:
            raise ValueError("lucir.end_task needs the trainer and the task's training loader (to choose exemplars)")
        self.teacher.freeze()  # Mammoth's old_net, taken before the finetuning
        data = trainer.collect(loader, ("input", "features", "label"))
        self.add_exemplars(data, data["features"].reshape(len(data["label"]), -1))
        if self.fitting_epochs > 0:
            self.finetune(trainer, loader_batch_size(trainer, loader))

    def finetune(self, trainer: Any, batch_size: int) -> None:
        """Class-balanced finetuning of the current task's rows and the scale on the memory."""
        if self.frozen is None or self.prepared_task != self.task:
            self.frozen = self.head.weight.detach().clone()  # end_task without a training step: hold as is
            self.prepared_task = self.task
        params = [p for p in self.head.parameters() if p.requires_grad]
        run_optimizer = getattr(trainer, "optimizer", None)  # Mammoth finetunes with the run's momentum and decay
        group = run_optimizer.param_groups[0] if run_optimizer is not None else {}
        momentum, decay = float(group.get("momentum", 0.0)), float(group.get("weight_decay", 0.0))
        optimizer = torch.optim.SGD(params, lr=self.lr_finetune, momentum=momentum, weight_decay=decay)
        schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=_FINETUNE_MILESTONES, gamma=0.1)
        device = self.head.weight.device
        try:
            with training_mode(self.model), batchnorm_statistics_frozen(self.model):
                for _ in range(self.fitting_epochs):
                    everything = self.memory.all()
                    order = torch.randperm(len(everything["label"]), generator=self.memory.generator)
                    for start in range(0, len(order), batch_size):
                        rows = order[start : start + batch_size]
                        x, y = everything["input"][rows].to(device), everything["label"][rows].to(device)
                        with torch.no_grad():
                            features = self.model({"input": x})["features"]
                        loss = self.lucir_loss(self.head(features), features, y, None)
                        optimizer.zero_grad(set_to_none=True)
                        loss.backward()
                        optimizer.step()
                        schedule.step()
                        self.hold_rows()
        finally:
            optimizer.zero_grad(set_to_none=True)

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "prepared_task": self.prepared_task,
            "frozen": None if self.frozen is None else self.frozen.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.prepared_task = int(state.get("prepared_task", -1))
        frozen = state.get("frozen")
        self.frozen = None if frozen is None else frozen.to(self.head.weight.device)
