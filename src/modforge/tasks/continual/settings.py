"""The ``continual:`` section of a config, as typed settings (read by the task and its run)."""

from __future__ import annotations

from typing import Any

from ...core.arguments import signature_of
from ...core.errors import ConfigError

__all__ = ["ContinualSettings", "continual_settings"]


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
