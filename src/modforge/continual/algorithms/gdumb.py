"""``gdumb`` — Greedy Sampler and Dumb Learner (Prabhu et al., "GDumb: A Simple Approach that
Questions Our Progress in Continual Learning", ECCV 2020).

Following Mammoth's ``models/gdumb.py`` (aimagelab/mammoth, commit
e75a491c69fd729edeb01431afb753d9157d9a81):

* **Stream**: the training steps do not train; each sample of the task's first epoch is
  offered to the memory (Mammoth forces one epoch; later epochs of a task offer nothing), and
  the step's loss is a constant zero, so the optimizer leaves the model as it is.
* **Memory**: the paper's greedy class-balancing sampler (``buffer_policy: greedy_balanced``,
  the default): a sample is kept while its class holds fewer than ``buffer_size / classes
  seen`` slots, replacing a random sample of a largest class once the memory is full.
  Mammoth's file keeps a plain reservoir buffer instead: ``buffer_policy: reservoir``.
* **Dumb learner**: at the end of each task the model is reset to the weights it started the
  run with and trained on the memory alone for ``fitting_epochs`` epochs — SGD (``optim_mom``,
  ``optim_wd``, ``optim_nesterov``), a first epoch at ``maxlr / 10``, then ``maxlr`` with cosine
  annealing with warm restarts down to ``minlr`` (period 1 epoch, doubling), batches of the
  training batch size, the memory reshuffled every epoch, cross-entropy; with ``cutmix_alpha``,
  CutMix on half of the batches (box ratio from Beta(α, α), the loss mixed by the pasted area).

Differences from Mammoth, and why: Mammoth retrains only after the last task (its earlier
evaluations see an untrained network); modforge evaluates after every task, so the learner is
retrained at every task end. "From scratch" is the model's starting weights (kept in the
algorithm's state), not a fresh random draw, so a resumed run retrains identically. CutMix
cuts boxes out of pictures: it applies to image batches ([B, C, H, W]); other inputs are
trained without it. All randomness (reshuffles, CutMix) comes from the algorithm's seeded
generator, part of its checkpointed state.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat, PositiveFloat, PositiveInt
from ...core.registries import register_algorithm
from ..buffer import Policy
from .base import ReplayAlgorithm
from .passes import stepped_batch_size, training_mode

__all__ = ["GDumb", "cutmix"]

CUTMIX_PROBABILITY = 0.5  # Mammoth's cutmix_prob: the share of batches mixed


def cutmix(
    inputs: torch.Tensor, labels: torch.Tensor, alpha: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """CutMix of an image batch ([B, C, H, W]): with probability 1/2, a box of area ratio
    about ``1 − λ`` (``λ ~ Beta(alpha, alpha)``), centred uniformly and clipped to the picture,
    is pasted from a shuffled copy of the batch. Returns ``(mixed, labels_a, labels_b, λ)``
    with ``λ`` the exact share of each picture left untouched (1: not mixed)."""
    if float(torch.rand((), generator=generator, dtype=torch.float64)) > CUTMIX_PROBABILITY:
        return inputs, labels, labels, 1.0
    seed = int(torch.randint(0, 1 << 62, (1,), generator=generator))
    lam = float(np.random.default_rng(seed).beta(alpha, alpha))
    order = torch.randperm(len(labels), generator=generator).to(labels.device)
    height, width = inputs.shape[2], inputs.shape[3]
    cut = math.sqrt(1.0 - lam)
    cut_h, cut_w = int(height * cut), int(width * cut)
    cy, cx = (int(torch.randint(0, n, (1,), generator=generator)) for n in (height, width))
    y1, y2 = min(max(cy - cut_h // 2, 0), height), min(max(cy + cut_h // 2, 0), height)
    x1, x2 = min(max(cx - cut_w // 2, 0), width), min(max(cx + cut_w // 2, 0), width)
    mixed = inputs.clone()
    mixed[:, :, y1:y2, x1:x2] = inputs[order, :, y1:y2, x1:x2]
    lam = 1.0 - (y2 - y1) * (x2 - x1) / (height * width)
    return mixed, labels, labels[order], lam


@register_algorithm("gdumb")
class GDumb(ReplayAlgorithm):
    """GDumb: a class-balanced memory, and a model retrained on it alone at every task end.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        maxlr: the retraining's peak learning rate (Mammoth's ``--maxlr``).
        minlr: the floor of its cosine annealing (``--minlr``).
        fitting_epochs: epochs of retraining on the memory (``--fitting_epochs``).
        cutmix_alpha: CutMix's Beta parameter for image inputs (None: no CutMix).
        optim_mom: the retraining SGD's momentum (Mammoth's ``--optim_mom``).
        optim_wd: its weight decay (``--optim_wd``).
        optim_nesterov: Nesterov momentum (``--optim_nesterov``).
        buffer_size: how many samples the memory keeps.
        buffer_policy: 'greedy_balanced' (GDumb's sampler), 'reservoir' (Mammoth's buffer) or
            'class_balanced'.
        seed: seeds the memory's and the retraining's draws (wired from the config's seed).
    """

    weight_average = (  # why train.ema cannot evaluate it
        "it retrains the model from scratch at each task end, outside the optimizer steps the average follows"
    )

    settings = ("class-il",)

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        maxlr: PositiveFloat = 0.05,
        minlr: NonNegativeFloat = 5e-4,
        fitting_epochs: PositiveInt = 256,
        cutmix_alpha: PositiveFloat | None = 1.0,
        optim_mom: NonNegativeFloat = 0.0,
        optim_wd: NonNegativeFloat = 0.0,
        optim_nesterov: bool = False,
        buffer_size: PositiveInt = 200,
        buffer_policy: Policy = "greedy_balanced",
        seed: int = 0,
    ):
        super().__init__(model, num_classes, buffer_size, None, buffer_policy, seed)
        if not maxlr > 0:
            raise ValueError(f"maxlr must be positive, got {maxlr}")
        if not 0 <= minlr <= maxlr:
            raise ValueError(f"minlr must be in [0, maxlr = {maxlr}], got {minlr}")
        if fitting_epochs < 1:
            raise ValueError(f"fitting_epochs must be at least 1, got {fitting_epochs}")
        if cutmix_alpha is not None and not cutmix_alpha > 0:
            raise ValueError(f"cutmix_alpha must be positive (or None: no CutMix), got {cutmix_alpha}")
        if optim_mom < 0 or optim_wd < 0:
            raise ValueError(f"optim_mom and optim_wd must not be negative, got {optim_mom} and {optim_wd}")
        if optim_nesterov and optim_mom == 0:
            raise ValueError("optim_nesterov needs a momentum (optim_mom > 0)")
        self.maxlr, self.minlr, self.fitting_epochs = maxlr, minlr, fitting_epochs
        self.cutmix_alpha = cutmix_alpha
        self.optim_mom, self.optim_wd, self.optim_nesterov = optim_mom, optim_wd, bool(optim_nesterov)
        self.generator = torch.Generator().manual_seed((int(seed) * 7919 + 17) % (1 << 63))
        self.initial = {k: v.detach().clone().cpu() for k, v in model.state_dict().items()}  # "from scratch"
        self.train_batch = 0  # the largest training batch seen
        self.fill_epoch: int | None = None  # the trainer's epoch in which the current task's samples are offered

    # ------------------------------------------------------------------- step
    def begin_task(self, task: int, trainer: Any = None, classes: Any = ()) -> None:
        super().begin_task(task, trainer, classes)
        self.fill_epoch = getattr(trainer, "epoch", None)

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        labels = batch["label"]
        self.train_batch = max(self.train_batch, len(labels) * self.processes.world_size)
        if self.fill_epoch is None or getattr(trainer, "epoch", None) == self.fill_epoch:
            rows = self.processes.gather_rows({"label": labels, "input": batch["input"]})  # every process's batch
            self.buffer.add(rows["label"], input=rows["input"])
        if getattr(trainer, "scaler", None) is not None:  # fp16's scaler needs gradients to check: zeros
            return sum(p.sum() for p in self.model.parameters() if p.requires_grad) * 0.0
        return torch.zeros((), device=labels.device, requires_grad=True)  # no gradient: the optimizer skips all

    # -------------------------------------------------------- task boundaries
    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        if self.buffer.is_empty:
            return
        if not self.train_batch and loader is None:
            raise ValueError("gdumb.end_task needs the task's loader (its batch size) when no step has run")
        self.fit_memory(stepped_batch_size(self, loader))

    def fit_memory(self, batch_size: int) -> None:
        """Reset the model to its starting weights and train it on the memory alone."""
        model = self.model
        model.load_state_dict(self.initial)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.SGD(params, lr=self.maxlr, momentum=self.optim_mom, weight_decay=self.optim_wd,
                                    nesterov=self.optim_nesterov)  # fmt: skip
        schedule = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=1, T_mult=2, eta_min=self.minlr)
        memory = self.buffer.all(("input", "label"))
        try:
            with training_mode(model):
                for epoch in range(self.fitting_epochs):
                    if epoch < 2:  # a warm-up epoch at a tenth of maxlr, then maxlr
                        for group in optimizer.param_groups:
                            group["lr"] = self.maxlr * (0.1 if epoch == 0 else 1.0)
                    else:
                        schedule.step()
                    order = torch.randperm(len(memory["label"]), generator=self.generator)
                    for start in range(0, len(order), batch_size):
                        rows = order[start : start + batch_size].to(memory["label"].device)
                        self._fit_step(optimizer, memory["input"][rows], memory["label"][rows])
        finally:
            optimizer.zero_grad(set_to_none=True)

    def _fit_step(self, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        if self.cutmix_alpha is not None and inputs.dim() == 4:
            mixed, labels_a, labels_b, lam = cutmix(inputs, labels, self.cutmix_alpha, self.generator)
            logits = self.model({"input": mixed})["logits"]
            loss = lam * F.cross_entropy(logits, labels_a) + (1.0 - lam) * F.cross_entropy(logits, labels_b)
        else:
            loss = F.cross_entropy(self.model({"input": inputs})["logits"], labels)
        loss.backward()
        optimizer.step()

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "generator": self.generator.get_state(),
            "initial": {k: v.clone() for k, v in self.initial.items()},
            "train_batch": self.train_batch,
            "fill_epoch": self.fill_epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.generator.set_state(state["generator"])
        self.initial = {k: v.clone() for k, v in state["initial"].items()}
        self.train_batch = int(state.get("train_batch", 0))
        fill = state.get("fill_epoch")
        self.fill_epoch = None if fill is None else int(fill)
