"""``si`` — Synaptic Intelligence (Zenke, Poole & Ganguli, "Continual Learning Through Synaptic
Intelligence", ICML 2017), as Mammoth implements it (aimagelab/mammoth ``models/si.py``,
commit e75a491c69fd729edeb01431afb753d9157d9a81).

* **Path integral.** During a task every optimizer step adds, per parameter, the gradient of
  the *task loss* times the step's decrease of the parameter: ``ω += g · (θ_before − θ_after)``
  — how much that parameter's movement lowered the loss.
* **Importance.** At the end of a task ``Ω += ω / ((θ − θ*)² + ξ)``, with ``θ*`` the parameters
  at the start of the task (the anchor); then the anchor moves to the parameters now and ``ω``
  restarts at zero.
* **Penalty.** Later tasks pay ``c · Σ Ω (θ − θ*)²``. As in Mammoth its gradient
  ``2 c Ω (θ − θ*)`` is added to the parameters' gradients before the step (so the reported
  loss is the task loss, and ``ω`` sees the task loss's gradient only); then every gradient is
  clipped to ``[−clip_value, clip_value]`` (Mammoth's fixed ``clip_grad_value_(…, 1)``).

The step's gradient and parameters are read in :meth:`~.base.Algorithm.before_step` and the
change in :meth:`~.base.Algorithm.after_step` (the continual trainer's hooks around its
optimizer step). With gradient accumulation the step's gradient is the mean over its
micro-batches; with fp16 precision it is unscaled before use, and a step the grad scaler skips
(non-finite gradients) adds nothing to ``ω``.
"""

from __future__ import annotations

from typing import Any

import torch

from ...core.constraints import NonNegativeFloat, PositiveFloat
from ...core.registries import register_algorithm
from .base import Algorithm
from .checks import check, non_negative

__all__ = ["SI"]


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


@register_algorithm("si")
class SI(Algorithm):
    """Synaptic Intelligence.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        c: weight of the surrogate (quadratic) loss (Mammoth's ``--c``).
        xi: damping ξ added to the squared parameter change of a task (Mammoth's ``--xi``).
        clip_value: each gradient entry is clipped to ``[−clip_value, clip_value]`` before the
            step (Mammoth clips to 1, hard-coded); None: no clipping.
    """

    settings = ("class-il", "domain-il")

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        c: NonNegativeFloat = 0.5,
        xi: PositiveFloat = 1.0,
        clip_value: PositiveFloat | None = 1.0,
    ):
        super().__init__(model, num_classes)
        check(non_negative("c", c))
        if not xi > 0:
            raise ValueError(f"xi must be positive (it keeps Ω finite where a parameter did not move), got {xi}")
        if clip_value is not None and not clip_value > 0:
            raise ValueError(f"clip_value must be positive or None, got {clip_value}")
        self.c, self.xi, self.clip_value = float(c), float(xi), clip_value
        self.anchor: torch.Tensor | None = None  # θ* (the parameters when the task began)
        self.big_omega: torch.Tensor | None = None  # Ω (None until the first task ends)
        self.small_omega: torch.Tensor | None = None  # ω of the task so far
        self._step: tuple[torch.Tensor, torch.Tensor] | None = None  # (task gradient, θ before) of the step under way

    def _params(self) -> list[torch.nn.Parameter]:
        return list(self.model.parameters())

    def _flat_params(self) -> torch.Tensor:
        return _flat([p.detach() for p in self._params()]).clone()

    # --------------------------------------------------------- task boundaries
    def begin_task(self, task: int, trainer: Any = None, classes: Any = ()) -> None:
        super().begin_task(task, trainer, classes)
        if self.anchor is None:  # the first task: θ* is where training starts
            self.anchor = self._flat_params()
        if self.small_omega is None:
            self.small_omega = torch.zeros_like(self.anchor)

    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        now = self._flat_params()
        anchor = self.anchor if self.anchor is not None else now
        small = self.small_omega if self.small_omega is not None else torch.zeros_like(now)
        if self.big_omega is None:
            self.big_omega = torch.zeros_like(now)
        self.big_omega += small / ((now - anchor) ** 2 + self.xi)
        self.anchor = now
        self.small_omega = torch.zeros_like(now)

    # ------------------------------------------------------------------- step
    def penalty(self) -> torch.Tensor:
        """``Σ Ω (θ − θ*)²`` (zero before the first task ends); its ``c``-weighted gradient
        is what :meth:`before_step` adds."""
        params = _flat(list(self._params()))
        if self.big_omega is None:
            return torch.zeros((), device=params.device)
        return (self.big_omega * (params - self.anchor) ** 2).sum()

    def before_step(self, trainer: Any) -> None:
        params = self._params()
        scaler = getattr(trainer, "scaler", None)
        scale = float(scaler.get_scale()) if scaler is not None else 1.0
        grads = _flat([p.grad.detach() if p.grad is not None else torch.zeros_like(p) for p in params]) / scale
        before = self._flat_params()
        self._step = (grads, before)
        if self.big_omega is not None and self.c > 0:
            extra = (2.0 * self.c * scale) * self.big_omega * (before - self.anchor)
            offset = 0
            for p in params:
                n = p.numel()
                if p.requires_grad:
                    piece = extra[offset : offset + n].view_as(p).to(p.dtype)
                    p.grad = piece.clone() if p.grad is None else p.grad + piece
                offset += n
        if self.clip_value is not None:
            torch.nn.utils.clip_grad_value_([p for p in params if p.grad is not None], self.clip_value * scale)

    def after_step(self, trainer: Any) -> None:
        if self._step is None:
            return
        grads, before = self._step
        self._step = None
        contribution = grads * (before - self._flat_params())
        if not bool(torch.isfinite(contribution).all()):  # a step the grad scaler skipped
            return
        if self.small_omega is None:
            self.small_omega = torch.zeros_like(contribution)
        self.small_omega += contribution

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "anchor": self.anchor,
            "big_omega": self.big_omega,
            "small_omega": self.small_omega,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        device = next(self.model.parameters()).device  # checkpoints load onto the CPU
        self.anchor, self.big_omega, self.small_omega = (
            None if state.get(k) is None else state[k].to(device) for k in ("anchor", "big_omega", "small_omega")
        )
        self._step = None
