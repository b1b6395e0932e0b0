"""A line now and then from long counted work (rendering a corpus, a stream of files): when the
output is a log file or a pipe, nobody should wait minutes without a sign of life."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["Heartbeat"]


class Heartbeat:
    """``tick(done)`` logs ``"<what>: done/total (rate/s)"`` when ``every`` seconds passed since
    the start or the last line; ``clock`` is replaceable (tests).

    Args:
        log: where the lines go (INFO).
        what: the work, as the line names it (``"rendering utterances"``).
        total: how much there is.
        every: the most seconds between two lines.
    """

    def __init__(self, log: logging.Logger, what: str, total: int, every: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
        self.log, self.what, self.total, self.every, self.clock = log, what, int(total), float(every), clock
        self.started = self.due = clock()
        self.due += self.every

    def tick(self, done: int) -> None:
        now = self.clock()
        if now < self.due:
            return
        self.due = now + self.every
        rate = done / max(now - self.started, 1e-9)
        self.log.info("%s: %d/%d (%.1f/s)", self.what, done, self.total, rate)
