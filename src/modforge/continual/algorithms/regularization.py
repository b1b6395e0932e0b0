"""``ewc_online`` — online Elastic Weight Consolidation (Schwarz et al., "Progress & Compress",
ICML 2018; Kirkpatrick et al., PNAS 2017): after each task the diagonal Fisher information of
the parameters is estimated on that task's data and accumulated with decay ``gamma``; later
tasks pay ``e_lambda · Σ F_i (θ_i − θ*_i)²`` for moving parameters that mattered. It works on
the model's flat parameter and gradient vectors (Mammoth's ``get_params``/``get_grads``)."""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat
from ...core.registries import register_algorithm
from .base import Algorithm
from .checks import check, non_negative, unit_interval
from .passes import training_mode

__all__ = ["EWCOnline", "sgd_stability_margin"]

log = logging.getLogger("modforge.continual")


def sgd_stability_margin(optimizer: Any, stiffness: float) -> float | None:
    """How far plain SGD is from oscillating on a quadratic penalty ``k·(θ − θ*)²`` with the
    given stiffness ``k`` (largest ``λ·F_i``): ``lr·k / (1 + momentum)``, which must stay
    below 1 (without momentum one step multiplies the distance to θ* by ``1 − 2·lr·k``;
    heavy-ball momentum widens the bound by ``1 + momentum``). None for optimizers
    that rescale their steps (Adam...), where the bound does not apply."""
    if type(optimizer) is not torch.optim.SGD:
        return None
    group = optimizer.param_groups[0]  # the configured rate: a schedule that decayed it restarts at the next task
    step = float(group.get("initial_lr", group["lr"])) * (1.0 - float(group.get("dampening", 0.0)))
    return step * stiffness / (1.0 + float(group.get("momentum", 0.0)))


def _flat_params(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter in one vector, differentiable (unlike ``get_params``, which copies)."""
    return torch.cat([p.reshape(-1) for p in model.parameters()])


@register_algorithm("ewc_online")
class EWCOnline(Algorithm):
    """Online EWC.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        e_lambda: strength of the quadratic penalty.
        gamma: decay of the Fisher information accumulated over earlier tasks (1: no decay).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        e_lambda: NonNegativeFloat = 10.0,
        gamma: NonNegativeFloat = 1.0,
    ):
        super().__init__(model, num_classes)
        check(non_negative("e_lambda", e_lambda), unit_interval("gamma", gamma))
        self.e_lambda, self.gamma = e_lambda, gamma
        self.fisher: torch.Tensor | None = None
        self.anchor: torch.Tensor | None = None  # θ* after the last task

    def penalty(self) -> torch.Tensor:
        """``Σ F_i (θ_i − θ*_i)²`` (zero before the first task ends)."""
        if self.fisher is None:
            return torch.zeros((), device=next(self.model.parameters()).device)
        return (self.fisher * (_flat_params(self.model) - self.anchor) ** 2).sum()

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        loss = trainer.forward(batch)["loss"]
        return loss if self.fisher is None else loss + self.e_lambda * self.penalty()

    def fisher_information(self, loader: Any, prepare: Any = None) -> torch.Tensor:
        """The diagonal empirical Fisher on ``loader``'s samples, one at a time (eval mode):
        the mean of ``p(y|x) · (∇ log p(y|x))²`` — each squared gradient weighted by the
        probability of the true label, as in Mammoth's implementation. ``prepare`` moves a
        batch to the model's device (the trainer's ``prepare_batch``)."""
        model = self.model
        total, count = torch.zeros_like(_flat_params(model).detach()), 0
        try:
            with training_mode(model, False):
                for batch in loader:
                    batch = prepare(batch) if prepare is not None else batch
                    for x, y in zip(batch["input"], batch["label"], strict=True):
                        model.zero_grad(set_to_none=True)
                        log_p = F.log_softmax(model({"input": x.unsqueeze(0)})["logits"], dim=1)[0, y]
                        log_p.backward()
                        grads = torch.cat([
                            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                            for p in model.parameters()
                        ])  # fmt: skip
                        total += log_p.detach().exp() * grads**2
                        count += 1
        finally:
            model.zero_grad(set_to_none=True)
        return total / max(count, 1)

    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        fisher = self.fisher_information(loader, getattr(trainer, "prepare_batch", None))
        self.fisher = fisher if self.fisher is None else self.gamma * self.fisher + fisher
        self.anchor = _flat_params(self.model).detach().clone()
        margin = sgd_stability_margin(getattr(trainer, "optimizer", None), self.e_lambda * float(self.fisher.max()))
        if margin is not None and margin >= 1.0:
            log.warning(
                "ewc_online: e_lambda %g × the largest Fisher value %.3g is too stiff for SGD at this learning "
                "rate (lr·λ·F = %.2f ≥ 1): the penalty will make those weights oscillate and diverge. Lower "
                "e_lambda below %.3g or the learning rate.",
                self.e_lambda, float(self.fisher.max()), margin, self.e_lambda / margin,
            )  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "fisher": self.fisher, "anchor": self.anchor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        device = next(self.model.parameters()).device  # checkpoints load onto the CPU
        self.fisher, self.anchor = (None if state.get(k) is None else state[k].to(device) for k in ("fisher", "anchor"))
