"""The Trainer with a continual-learning algorithm in charge of the step.

Only the step changes: the loop, callbacks, checkpoints and exact resume are the
:class:`~modforge.train.trainer.Trainer`'s. The algorithm's state (its buffer, stored
logits, importance weights...) is saved in every checkpoint and restored with it.

With several processes the model is not wrapped in DDP: a method forwards several batches
per step (the stream, one or two replay minibatches, a teacher), computes gradients of its
own (A-GEM, GEM) and changes them before the step (SI), which DDP's backward hooks do not
follow. Every process runs the plain model and the gradients are averaged once per optimizer
step, before the method sees them — what DDP's reducer would leave, at the point the method
expects it (see :mod:`~modforge.continual.processes` for the method's state) — and, as DDP does,
every process takes rank 0's buffers (BatchNorm statistics) after each step. The runner gives
every process rank 0's starting weights before the method is built.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..train import distributed
from ..train.trainer import Trainer
from .algorithms.base import Algorithm
from .processes import Processes

__all__ = ["ContinualTrainer"]


class ContinualTrainer(Trainer):
    """A :class:`Trainer` whose :meth:`training_step` is ``algorithm.training_step``.

    Args:
        algorithm: the continual-learning method (``sgd``, ``er``, ``der``...).
        *args, **kwargs: the Trainer's.
    """

    def __init__(self, *args: Any, algorithm: Algorithm, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.algorithm = algorithm
        algorithm.processes = Processes(self.world_size, self.rank)
        self._float_buffers = any(b.is_floating_point() for b in self.model.buffers())
        self.train_loader: Any = None  # the loader of the current fit() (the task being trained)
        # the task loop's progress (saved with every checkpoint): tasks whose end-of-task work
        # and evaluation are done, and the accuracy matrices so far
        self.continual: dict[str, Any] = {"tasks_done": 0, "class_il": [], "task_il": []}

    def forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        """One forward pass of the runnable (what algorithms call, on any batch they make)."""
        return self.runnable(batch)

    def fit(self, train_loader: Any, val_loader: Any = None, resume: dict[str, Any] | None = None) -> list[Any]:
        self.train_loader = train_loader  # the current task's data, for methods that read it whole (LUCIR imprints)
        return super().fit(train_loader, val_loader, resume)

    def training_step(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.algorithm.training_step(self, batch)

    def _replicated(self) -> nn.Module:
        """The plain model on every process: gradients are averaged in :meth:`optimizer_step`."""
        return self.model

    def optimizer_step(self) -> None:
        """The Trainer's step (clip, step, zero the gradients) between the algorithm's
        :meth:`~Algorithm.before_step` and :meth:`~Algorithm.after_step`; with several
        processes, the gradients are first averaged over them."""
        if self.world_size > 1:
            distributed.average_gradients([p for p in self.model.parameters() if p.requires_grad])
        self.algorithm.before_step(self)
        super().optimizer_step()
        if self.world_size > 1 and self._float_buffers:  # as DDP would: one set of BatchNorm statistics
            distributed.broadcast_buffers(self.model, what="sharing buffers after a step")
        self.algorithm.after_step(self)

    def save_checkpoint(self, *, keep_last: int = 3, best: bool = False) -> Any:
        """Save as the Trainer does, but never as ``best.pt``: an epoch's validation metric is
        measured on one task only, so no epoch of a sequence is "best" — the final model is
        the result, and ``modforge test`` / ``export`` fall back to ``last.pt``."""
        return super().save_checkpoint(keep_last=keep_last, best=False)

    def checkpoint_payload(self) -> dict[str, Any]:
        return {**super().checkpoint_payload(), "algorithm": self.algorithm.state_dict(), "continual": self.continual}

    def load_state(self, payload: dict[str, Any], generator: torch.Generator | None = None) -> None:
        super().load_state(payload, generator)
        if payload.get("algorithm") is not None:
            self.algorithm.load_state_dict(payload["algorithm"])
        if payload.get("continual") is not None:
            self.continual = {k: (list(v) if isinstance(v, list) else v) for k, v in payload["continual"].items()}
