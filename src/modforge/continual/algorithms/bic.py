"""``bic`` — Bias Correction (Wu et al., "Large Scale Incremental Learning", CVPR 2019), as
Mammoth implements it (aimagelab/mammoth ``models/bic.py``, commit
e75a491c69fd729edeb01431afb753d9157d9a81; itself after github.com/sairin1202/BIC).

* **Memory.** Exemplars of the classes seen, the memory (``buffer_size``) split evenly over
  them, chosen by herding on normalised features (the memory modforge's iCaRL keeps).
* **A held-out part.** When a task ``t > 0`` begins, a share ``valset_split`` of each old
  class's exemplars is held out (at least one where a class has two or more, never all), and
  so are the first training samples of each new class that the task's batches bring, as
  many per class as an old class holds out (recognised by their ``index``, so they stay out
  in every epoch). Held-out samples are never trained on; they are the balanced set the
  bias-correction layer is fitted on.
* **Training.** The current batch (held-out rows removed) joined with a minibatch of the
  other exemplars; the loss is ``(1 − λ)·CE + λ·T²·KD`` with ``λ = 1/(t+1)`` (0 on the
  first task), CE over the classes seen (and any class a blurry boundary brings early), and KD the cross-entropy between the softened
  (temperature ``temp``) outputs of the model frozen when the task began and the model's,
  over the old classes. With ``distill_after_bic`` the teacher's outputs first go through
  the correction learnt at the end of the previous task. ``wd_reg`` adds ``wd_reg · Σ θ²``.
* **Bias correction.** At the end of a task ``t > 0`` two numbers ``(β, α)``, starting at
  ``(0, 1)``, are fitted with Adam (learning rate 1e-3) for ``bic_epochs`` passes over the
  held-out set (shuffled minibatches of the training batch size) so that the logits of the
  task's new classes, ``α·z + β``, minimise the cross-entropy over the classes seen (the
  model itself is fixed, in eval mode). Then the memory is updated.
* **Evaluation.** :meth:`BiC.class_scores` applies the last correction to the newest
  classes' logits (from the end of the task until the next one begins, as Mammoth's
  ``forward``); the configured model alone gives the uncorrected logits, so an exported
  artifact would differ and is refused.

Differences from Mammoth, and why:

* Mammoth merges the exemplars into the task's dataset; modforge replays a minibatch of them
  each step (``minibatch_size``), as its iCaRL does — the loop belongs to the trainer.
* Mammoth keeps, per task, the first samples of its shuffled loader (random, balanced per
  task); here each class keeps its herding exemplars (the same machinery as ``icarl``).
* Mammoth holds out a random ``valset_split`` of the memory (a coin per exemplar) and as
  many new-task samples *in total*; here the counts are per class and equal for old and new
  classes — the class-balanced validation set of the paper.
* ``λ = 1/(t+1)`` is Mammoth's; the paper uses ``n_old / n_seen``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Probability
from ...core.registries import register_algorithm
from ..exemplars import ExemplarMemory
from .base import joined
from .checks import check, non_negative, positive
from .exemplar_base import ExemplarAlgorithm
from .passes import in_chunks, loader_batch_size

__all__ = ["BiC", "fit_bias_correction"]

log = logging.getLogger("modforge.continual")

_FORWARD_BATCH = 256  # samples per forward pass when held-out logits are computed
_BIAS_LR = 1e-3  # Mammoth's Adam learning rate for the two correction parameters


def _positions(classes: list[int], size: int, device: torch.device) -> torch.Tensor:
    """A lookup label → column of ``classes`` (−1 elsewhere)."""
    table = torch.full((size,), -1, dtype=torch.long, device=device)
    table[torch.as_tensor(classes, dtype=torch.long, device=device)] = torch.arange(len(classes), device=device)
    return table


def corrected(logits: torch.Tensor, classes: list[int], bias: torch.Tensor) -> torch.Tensor:
    """``logits`` with the columns ``classes`` mapped to ``bias[1]·z + bias[0]`` (differentiable)."""
    mask = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device)
    mask[torch.as_tensor(classes, dtype=torch.long, device=logits.device)] = True
    bias = bias.to(device=logits.device, dtype=logits.dtype)
    one, zero = torch.ones((), device=logits.device, dtype=logits.dtype), logits.new_zeros(())
    return logits * torch.where(mask, bias[1], one) + torch.where(mask, bias[0], zero)


def fit_bias_correction(
    logits: torch.Tensor,
    labels: torch.Tensor,
    seen: list[int],
    new: list[int],
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """Fit ``(β, α)`` from ``(0, 1)`` with Adam (lr 1e-3): ``epochs`` passes over shuffled
    minibatches of the fixed ``logits`` [N, classes], minimising the cross-entropy over the
    ``seen`` columns once the ``new`` columns are mapped to ``α·z + β``."""
    bias = torch.tensor([0.0, 1.0], requires_grad=True)
    optimizer = torch.optim.Adam([bias], lr=_BIAS_LR)
    logits, labels = logits.detach().float().cpu(), labels.cpu()
    cols = torch.as_tensor(seen, dtype=torch.long)
    targets = _positions(seen, logits.shape[1], torch.device("cpu"))[labels]
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(labels), batch_size):
            rows = order[start : start + batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(corrected(logits[rows], new, bias)[:, cols], targets[rows])
            loss.backward()
            optimizer.step()
    return bias.detach().clone()


@register_algorithm("bic")
class BiC(ExemplarAlgorithm):
    """Bias Correction (BiC).

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        buffer_size: the total number of exemplars kept over all classes.
        minibatch_size: how many exemplars are replayed per step (None: the batch size).
        bic_epochs: passes over the held-out set when the correction is fitted.
        temp: temperature of the distillation (its term is scaled by ``temp²``).
        valset_split: the share of each old class's exemplars held out (0 < valset_split < 1).
        wd_reg: weight of an extra ``Σ θ²`` penalty on every parameter (None: none).
        distill_after_bic: distil the teacher's outputs with its bias correction applied.
        seed: seeds the draws of exemplars and the correction's minibatches (the config's seed).
    """

    weight_average = (  # why train.ema cannot evaluate it
        "its bias correction is fitted at task ends on the trained weights' logits"
    )

    distributed = (  # why it trains in one process only
        "it holds out the first samples of each new class in the order the stream brings them, a decision "
        "each process would take on its own shard"
    )

    name = "bic"

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        buffer_size: PositiveInt = 200,
        minibatch_size: PositiveInt | None = None,
        bic_epochs: NonNegativeInt = 250,
        temp: PositiveFloat = 2.0,
        valset_split: Probability = 0.1,
        wd_reg: NonNegativeFloat | None = None,
        distill_after_bic: bool = True,
        seed: int = 0,
    ):
        super().__init__(model, num_classes, ExemplarMemory(buffer_size, seed), minibatch_size)
        check(
            non_negative("bic_epochs", bic_epochs),
            positive("temp", temp),
            None if 0.0 < valset_split < 1.0 else (
                "valset_split must be between 0 and 1 (exclusive: the correction needs held-out exemplars and "
                f"training needs the rest), got {valset_split}"
            ),
            non_negative("wd_reg", wd_reg),
        )  # fmt: skip
        self.bic_epochs, self.temp, self.valset_split = int(bic_epochs), float(temp), float(valset_split)
        self.wd_reg, self.distill_after_bic = wd_reg, bool(distill_after_bic)
        self.generator = torch.Generator().manual_seed((int(seed) + 1) % (1 << 63))  # the correction's minibatches
        self.bias: torch.Tensor | None = None  # (β, α) fitted at the end of the last task t > 0
        self.bias_classes: list[int] = []  # the classes it corrects (that task's new classes)
        self.bias_active = False  # applied by class_scores (from its task's end until the next task begins)
        self.held_old: dict[int, torch.Tensor] = {}  # class → positions of its held-out exemplars
        self.held_per_class = 0  # how many samples each new class holds out this task
        self.held_index = torch.zeros(0, dtype=torch.long)  # the index of each held-out new-class sample
        self.held_count: dict[int, int] = {}  # new class → samples held out so far

    # ------------------------------------------------------------ hold-out
    def held_out_count(self, exemplars: int) -> int:
        """How many of a class's ``exemplars`` are held out: ``valset_split`` of them,
        rounded, at least one and never all (none of a single exemplar)."""
        if exemplars < 2:
            return 0
        return max(1, min(exemplars - 1, round(self.valset_split * exemplars)))

    def _held_mask(self) -> torch.Tensor:
        """Which rows of ``memory.all()`` are held out."""
        parts = []
        for c in sorted(self.memory.exemplars):
            rows = torch.zeros(len(self.memory.exemplars[c]), dtype=torch.bool)
            if c in self.held_old:
                rows[self.held_old[c]] = True
            parts.append(rows)
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.bool)

    def _replay(self, size: int, device: torch.device) -> dict[str, torch.Tensor] | None:
        """``size`` exemplars that are not held out, drawn without replacement (None: none)."""
        if self.memory.is_empty:
            return None
        everything = self.memory.all()
        keep = (~self._held_mask()).nonzero().reshape(-1)
        if len(keep) == 0:
            return None
        chosen = keep[torch.randperm(len(keep), generator=self.memory.generator)[:size]]
        return {k: v[chosen].to(device) for k, v in everything.items()}

    def _hold_out_new(self, batch: dict[str, Any]) -> torch.Tensor:
        """Rows of the batch to train on: new-class samples already held out are dropped, and
        each new class's first samples are held out until it has ``held_per_class``."""
        labels = batch["label"]
        if self.held_per_class == 0:
            return torch.ones(len(labels), dtype=torch.bool, device=labels.device)
        if "index" not in batch:
            raise ValueError("bic holds out new-class samples by their 'index', and this batch has none "
                             f"(keys: {', '.join(map(str, batch))})")  # fmt: skip
        index = batch["index"].reshape(-1).cpu()
        held = torch.isin(index, self.held_index)
        new = set(self.new_classes)
        added = []
        for row, (label, sample) in enumerate(zip(labels.tolist(), index.tolist(), strict=True)):
            if held[row] or label not in new or self.held_count.get(label, 0) >= self.held_per_class:
                continue
            self.held_count[label] = self.held_count.get(label, 0) + 1
            added.append(sample)
            held[row] = True
        if added:
            self.held_index = torch.cat([self.held_index, torch.tensor(added, dtype=torch.long)])
        return ~held.to(labels.device)

    # --------------------------------------------------------- task boundaries
    def begin_task(self, task: int, trainer: Any = None, classes: Any = ()) -> None:
        super().begin_task(task, trainer, classes)
        self.bias_active = False  # Mammoth drops the correction from its forward while a task trains
        self.held_old, self.held_per_class = {}, 0
        self.held_index, self.held_count = torch.zeros(0, dtype=torch.long), {}
        if self.memory.is_empty:
            return
        self.teacher.freeze()  # Mammoth's old_net: the model as the task begins
        for c in sorted(self.memory.exemplars):
            count = self.held_out_count(len(self.memory.exemplars[c]))
            chosen = torch.randperm(len(self.memory.exemplars[c]), generator=self.memory.generator)[:count]
            self.held_old[c] = chosen.sort().values
            self.held_per_class = max(self.held_per_class, count)

    def _seen_only(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``logits`` with −inf outside the classes seen and the batch's own labels (a blurry
        boundary can bring a class before its task): the cross-entropy over those classes."""
        keep = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device)
        keep[torch.as_tensor(self.seen_classes, dtype=torch.long, device=logits.device)] = True
        keep[labels] = True
        return logits.masked_fill(~keep, float("-inf"))

    def lamda(self) -> float:
        """The distillation weight ``λ``: ``1/(t+1)`` once there is a teacher (Mammoth's)."""
        return 1.0 / (self.task + 1) if (self.teacher and self.old_classes and self.task > 0) else 0.0

    # ------------------------------------------------------------------- step
    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        device = batch["label"].device
        keep = self._hold_out_new(batch)
        current = {"input": batch["input"][keep], "label": batch["label"][keep]}
        past = self._replay(self.minibatch_size or len(batch["label"]), device)
        data = joined(current, past)
        if len(data["label"]) == 0:  # every row held out and nothing to replay: a step that changes nothing
            return trainer.forward({"input": batch["input"]})["logits"].sum() * 0.0
        logits = trainer.forward({"input": data["input"]})["logits"]
        loss = F.cross_entropy(self._seen_only(logits, data["label"]), data["label"])
        lamda = self.lamda()
        if lamda > 0:
            teacher = self.teacher({"input": data["input"]})["logits"].to(logits.dtype)
            if self.distill_after_bic and self.bias is not None:
                teacher = corrected(teacher, self.bias_classes, self.bias)
            old = torch.as_tensor(self.old_classes, dtype=torch.long, device=device)
            t = self.temp
            student = F.log_softmax(logits.index_select(1, old) / t, dim=1)
            target = F.softmax(teacher.index_select(1, old) / t, dim=1)
            distillation = -(target * student).sum(1).mean()
            loss = (1.0 - lamda) * loss + lamda * distillation * t * t
        if self.wd_reg:
            loss = loss + self.wd_reg * sum((p**2).sum() for p in self.model.parameters())
        return loss

    # ---------------------------------------------------------- end of task
    def held_out_set(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The held-out exemplars of the old classes and the held-out samples of the new ones
        (``data``: the task's samples with their ``index``)."""
        everything = self.memory.all() if not self.memory.is_empty else None
        inputs, labels = [], []
        if everything is not None:
            mask = self._held_mask()
            inputs.append(everything["input"][mask])
            labels.append(everything["label"][mask])
        if len(self.held_index):
            rows = torch.isin(data["index"].reshape(-1).cpu(), self.held_index)
            inputs.append(data["input"][rows])
            labels.append(data["label"][rows])
        if not inputs:
            return {"input": torch.zeros(0), "label": torch.zeros(0, dtype=torch.long)}
        return {"input": torch.cat(inputs), "label": torch.cat(labels)}

    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        if trainer is None or loader is None:
            raise ValueError(
                "bic.end_task needs the trainer and the task's training loader (held-out samples, exemplars)"
            )
        data = trainer.collect(loader, ("input", "features", "label", "index"))
        self.bias_active = False
        if self.old_classes and self.new_classes:
            held = self.held_out_set(data)
            if len(held["label"]) == 0:
                log.warning("bic: no held-out samples at the end of task %d: no bias correction fitted", task + 1)
                self.bias, self.bias_classes = None, []
            else:
                logits = trainer.collect(in_chunks({"input": held["input"]}, _FORWARD_BATCH), ("logits",))["logits"]
                self.bias = fit_bias_correction(
                    logits,
                    held["label"],
                    self.seen_classes,
                    self.new_classes,
                    self.bic_epochs,
                    loader_batch_size(trainer, loader),
                    self.generator,
                )
                self.bias_classes, self.bias_active = list(self.new_classes), True
                log.info("bic: task %d correction of classes %s: α=%.4f β=%.4f", task + 1, self.bias_classes,
                         float(self.bias[1]), float(self.bias[0]))  # fmt: skip
        self.update_memory(data)
        self.held_old, self.held_per_class = {}, 0
        self.held_index, self.held_count = torch.zeros(0, dtype=torch.long), {}

    def update_memory(self, data: dict[str, torch.Tensor]) -> None:
        """Shrink every class to its share of the memory; add the task's classes by herding."""
        self.add_exemplars(data, F.normalize(data["features"], dim=1))

    # ------------------------------------------------------------- evaluation
    def class_scores(self, trainer: Any, loader: Any) -> dict[str, torch.Tensor]:
        """The model's logits, with the newest classes' corrected (``α·z + β``) while the
        correction is in force."""
        out = super().class_scores(trainer, loader)
        if self.bias_active and self.bias is not None:
            out["scores"] = corrected(out["scores"], self.bias_classes, self.bias)
        return out

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "generator": self.generator.get_state(),
            "bias": None if self.bias is None else self.bias.clone(),
            "bias_classes": list(self.bias_classes),
            "bias_active": self.bias_active,
            "held_old": {int(c): v.clone() for c, v in self.held_old.items()},
            "held_per_class": self.held_per_class,
            "held_index": self.held_index.clone(),
            "held_count": dict(self.held_count),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.generator.set_state(state["generator"])
        self.bias = None if state.get("bias") is None else state["bias"].clone().cpu()
        self.bias_classes = [int(c) for c in state.get("bias_classes", [])]
        self.bias_active = bool(state.get("bias_active", False))
        self.held_old = {int(c): v.clone().cpu() for c, v in state.get("held_old", {}).items()}
        self.held_per_class = int(state.get("held_per_class", 0))
        self.held_index = state.get("held_index", torch.zeros(0, dtype=torch.long)).clone().cpu()
        self.held_count = {int(c): int(n) for c, n in state.get("held_count", {}).items()}
