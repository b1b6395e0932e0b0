"""``lookahead`` — pull the weights back to a slow average every few steps (airbench's schedule).

Lookahead (Zhang et al., "Lookahead Optimizer: k steps forward, 1 step back", 2019) keeps a
slow copy of the weights; every ``every`` optimizer steps the slow copy moves towards the
fast weights and the fast weights restart from it. airbench (Keller Jordan's CIFAR-10 speed
runs) uses it with a pull that fades over the run: after step ``t`` of ``T`` the slow copy
keeps ``decay = base · (t / T)³`` of itself (``base = 0.95⁵``), so early on the weights run
free and near the end they are averaged strongly; after the last step the weights become the
slow copy. Every floating entry of the state dict takes part (BatchNorm's running statistics
too), as in airbench.

Unlike ``train.ema`` (an average kept *beside* the weights, for evaluation), lookahead
changes the trajectory itself, so it is a callback acting after the optimizer step. Its slow
copy is part of the checkpoint: a resumed run continues bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ...core.constraints import NonNegativeFloat, PositiveInt, Probability
from ...core.registries import register_callback
from .base import Callback

if TYPE_CHECKING:  # pragma: no cover
    from ..trainer import Trainer

__all__ = ["Lookahead", "planned_steps"]


def planned_steps(trainer: Trainer) -> int:
    """The optimizer steps the run plans: ``max_steps`` when set (and reached first), else
    every epoch's steps."""
    per_epoch = max(1, -(-trainer.steps_per_epoch // trainer.accumulate))
    total = trainer.max_epochs * per_epoch
    return min(total, trainer.max_steps) if trainer.max_steps is not None else total


@register_callback("lookahead")
class Lookahead(Callback):
    """Every ``every`` optimizer steps: ``slow ← lerp(slow, weights, 1 − decay)``, then
    ``weights ← slow``, with ``decay = base · (step / total_steps)^power``; after the last
    step ``weights ← slow``.

    Args:
        every: optimizer steps between pulls (airbench: 5).
        base: the decay at the end of the run (airbench: 0.95⁵ ≈ 0.774).
        power: how the decay grows with the run's progress (airbench: cubic).
        total_steps: the run's length in optimizer steps (default: what the trainer plans).
    """

    order = 4  # the slow copy is the network as built, before whitening_init (order 5) sets its first layer

    def __init__(self, every: PositiveInt = 5, base: Probability = 0.95**5, power: NonNegativeFloat = 3.0,
                 total_steps: PositiveInt | None = None):  # fmt: skip
        if not 0.0 <= base <= 1.0:
            raise ValueError(f"base must be in [0, 1], got {base}")
        if power < 0:
            raise ValueError(f"power must not be negative, got {power}")
        self.every, self.base, self.power = int(every), float(base), float(power)
        self.total_steps = total_steps
        self.slow: dict[str, torch.Tensor] | None = None
        self._pairs: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
        self._planned = 0

    def decay(self, step: int) -> float:
        """How much of the slow copy the pull after ``step`` keeps."""
        return self.base * (step / self._planned) ** self.power

    def on_fit_start(self, trainer: Trainer) -> None:
        self._planned = int(self.total_steps or planned_steps(trainer))
        state = trainer.model.state_dict()
        if self.slow is None:  # a fresh run (a resumed one loaded its slow copy already)
            self.slow = {name: value.detach().clone() for name, value in state.items()}
        elif self.slow.keys() != state.keys():
            missing = sorted(set(state) - set(self.slow))[:3]
            raise ValueError(f"lookahead: the checkpoint's slow weights do not fit this model (missing {missing})")
        slow, fast = [], []
        for name, value in state.items():
            kept = self.slow[name].to(device=value.device, dtype=value.dtype)
            self.slow[name] = kept
            if value.is_floating_point():
                slow.append(kept)
                fast.append(value)
        self._pairs = (slow, fast)

    @torch.no_grad()
    def pull(self, decay: float) -> None:
        """``slow ← lerp(slow, weights, 1 − decay)``; ``weights ← slow``."""
        slow, fast = self._pairs
        torch._foreach_lerp_(slow, fast, 1.0 - decay)
        torch._foreach_copy_(fast, slow)

    def on_step_end(self, trainer: Trainer) -> None:
        step = trainer.global_step
        if step % self.every == 0:
            self.pull(self.decay(min(step, self._planned)))
        if step >= self._planned:
            self.pull(1.0)

    def state_dict(self) -> dict[str, Any]:
        return {"slow": None if self.slow is None else {k: v.detach().cpu().clone() for k, v in self.slow.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        slow = state.get("slow")
        self.slow = None if slow is None else {k: v.clone() for k, v in slow.items()}
