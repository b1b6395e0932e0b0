"""``progress`` — a live rich progress bar on a terminal; otherwise one plain line per epoch,
and within a long epoch a line every ``every_seconds`` (batch count, rate, loss), so a log
never goes silent for minutes."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from ...core.registries import register_callback
from ...core.text_safety import terminal_text
from .base import Callback

log = logging.getLogger("modforge.progress")


def _format(row: dict[str, Any]) -> str:
    parts = []
    for key, value in row.items():
        if key in ("epoch", "step"):
            continue
        parts.append(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
    return " · ".join(parts)


def epoch_label(trainer, number: int) -> str:
    """``epoch 3/30`` for epoch ``number`` (counted from 1). A trainer whose epochs belong to a
    larger sequence — a continual run's tasks, each with its own epochs — names them itself through
    a ``trainer.epoch_label(number)`` of its own (``task 5/5 · epoch 1/1``, not ``epoch 5/5``)."""
    own = getattr(trainer, "epoch_label", None)
    return own(number) if callable(own) else f"epoch {number}/{trainer.max_epochs}"


@register_callback("progress")
class Progress(Callback):
    """Shows training progress on stderr: a rich bar (steps, rate, loss every
    ``log_every`` steps) when stderr is a terminal, else a log line per epoch — and, inside an
    epoch that takes longer, a line every ``every_seconds`` (batches done of the epoch's, the
    rate, the last logged loss).

    Args:
        bar: 'auto' (a bar only on a terminal), 'always' or 'never'.
        every_seconds: without a bar, the most seconds of training without a line.
    """

    order = 60
    rank_zero_only = True  # writes files / the terminal

    clock = staticmethod(time.monotonic)  # what "seconds" are measured with (tests put a fake clock here)

    def __init__(self, bar: str = "auto", every_seconds: float = 30.0):
        if bar not in ("auto", "always", "never"):
            raise ValueError(f"bar must be 'auto', 'always' or 'never', got {bar!r}")
        if not every_seconds > 0:
            raise ValueError(f"every_seconds must be above 0, got {every_seconds!r}")
        self.every_seconds = float(every_seconds)
        self._line_due = 0.0
        self._line_from: tuple[float, int] = (0.0, 0)
        self.bar = bar == "always" or (bar == "auto" and sys.stderr.isatty())
        if self.bar:  # imported while setting up, not while training
            import rich.progress  # noqa: F401
        self._progress = None
        self._task = None
        self._started = 0.0
        self._next_update = 0.0

    def on_fit_start(self, trainer) -> None:
        if self.bar:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._progress = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"),
                transient=False,
                auto_refresh=False,  # no refresh thread competing for the GIL: redraws happen in the hooks
            )
            self._progress.start()

    def on_epoch_start(self, trainer) -> None:
        self._started = time.perf_counter()
        if self._progress is None:
            now = self.clock()
            self._line_due, self._line_from = now + self.every_seconds, (now, trainer.batch_in_epoch)
            return
        description = epoch_label(trainer, trainer.epoch + 1)
        if self._task is None:
            self._task = self._progress.add_task(
                description, total=trainer.steps_per_epoch, completed=trainer.batch_in_epoch, info=""
            )
        else:  # one bar, re-labelled per epoch: no new task and no redraw here (both cost a render)
            self._progress.update(
                self._task,
                total=trainer.steps_per_epoch,
                completed=trainer.batch_in_epoch,
                description=description,
                info="",
            )

    def _due(self) -> bool:
        """Redraw at most 10 times a second: the bar must not slow training (a redraw of
        the rich display costs about a millisecond)."""
        now = time.perf_counter()
        if now < self._next_update:
            return False
        self._next_update = now + 0.1
        return True

    def on_step_end(self, trainer) -> None:
        if self._progress is None:
            self._heartbeat(trainer)
            return
        if not self._due():
            return
        info = f"loss {trainer.last_logged_loss:.4g}" if trainer.last_logged_loss is not None else ""
        self._progress.update(self._task, completed=trainer.batch_in_epoch, info=info, refresh=True)

    def _heartbeat(self, trainer) -> None:
        """Without a bar: a line when ``every_seconds`` passed since the epoch began or the last line."""
        now = self.clock()
        if now < self._line_due:
            return
        since, batches = self._line_from
        rate = (trainer.batch_in_epoch - batches) / max(now - since, 1e-9)
        loss = f" · loss {trainer.last_logged_loss:.4g}" if trainer.last_logged_loss is not None else ""
        log.info("%s · batch %d/%s · %.2f batches/s%s", epoch_label(trainer, trainer.epoch + 1),
                 trainer.batch_in_epoch, trainer.steps_per_epoch or "?", rate, loss)  # fmt: skip
        self._line_due, self._line_from = now + self.every_seconds, (now, trainer.batch_in_epoch)

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        seconds = time.perf_counter() - self._started
        if self._progress is not None:  # the final state is drawn by on_fit_end if not now
            self._progress.update(
                self._task, completed=trainer.steps_per_epoch, info=terminal_text(_format(row)), refresh=self._due()
            )
        else:
            log.info("%s · %.1fs · %s", epoch_label(trainer, row["epoch"]), seconds, _format(row))

    def on_fit_end(self, trainer) -> None:
        if self._progress is not None:
            self._progress.stop()  # draws the final state
            self._progress = None
