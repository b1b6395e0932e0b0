"""The callback hooks and the shared rule for "did the monitored metric improve?"."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ...core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from ..trainer import Trainer

__all__ = ["Callback", "Mode", "improved", "monitored_value"]

Mode = Literal["min", "max", "auto"]


class Callback:
    """Override the hooks you need; ``order`` sets who runs first at each hook (lower
    first). ``state_dict``/``load_state_dict`` carry state across a resume.

    In a multi-process run every process runs the callbacks (so decisions such as early
    stopping are taken alike everywhere, on metrics that are the same everywhere), except
    those with ``rank_zero_only = True`` — the ones that only write files or the terminal."""

    order: ClassVar[int] = 50
    rank_zero_only: ClassVar[bool] = False

    def on_fit_start(self, trainer: Trainer) -> None:
        """Training starts (or resumes)."""

    def on_epoch_start(self, trainer: Trainer) -> None:
        """An epoch's first batch is next."""

    def on_step_end(self, trainer: Trainer) -> None:
        """An optimizer step just finished (only called for callbacks that override it)."""

    def on_epoch_end(self, trainer: Trainer, row: dict[str, Any]) -> None:
        """An epoch and its validation finished; ``row`` is its line of metrics."""

    def on_fit_end(self, trainer: Trainer) -> None:
        """Training finished (normally or by early stopping)."""

    def on_run_end(self, trainer: Trainer, summary: dict[str, Any]) -> None:
        """The whole run is over and its folder complete: the runner calls it (through
        :meth:`Trainer.end_run`) after its last ``fit()`` and its test, once ``summary.json``
        and the plots (``curves.png``...) are written (by rank 0, in a multi-process run);
        ``summary`` is what ``summary.json`` holds. Only called for callbacks that override
        it; a trainer used on its own, without the runner, never calls it."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    @classmethod
    def overrides(cls, hook: str) -> bool:
        return getattr(cls, hook) is not getattr(Callback, hook)


def improved(value: float | None, best: float | None, mode: str, min_delta: float = 0.0) -> bool:
    """True when ``value`` beats ``best`` by more than ``min_delta`` in direction ``mode``.

    A missing or NaN value never improves; the first real value always does. Works for
    negative metrics (log-likelihoods, negative losses) alike.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if best is None:
        return True
    return value > best + min_delta if mode == "max" else value < best - min_delta


def monitored_value(row: dict[str, Any], monitor: str, who: str) -> float | None:
    """The monitored metric from an epoch's row; a clear error when it is never logged."""
    if monitor in row:
        return row[monitor]
    names = sorted(k for k in row if k not in ("epoch", "step"))
    raise ConfigError(
        f"{who} monitors '{monitor}', but the logged metrics are: {', '.join(names)}", path=f"{who}.monitor"
    )
