"""Whether building something may fetch files over the network right now.

A part that can download published weights when it is built (``timm`` with ``hub: true``)
asks :func:`downloads_allowed` first. The model builder turns downloads off while it rebuilds
a model whose weights come from a checkpoint (``modforge test RUN``, ``--resume``, export):
the download would be overwritten at once, and the config being rebuilt is a *stored* one —
data, which never chooses what is connected to (DESIGN.md, "Destinations are not data").
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["downloads_allowed", "no_downloads"]

_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar("modforge_downloads_allowed", default=True)


def downloads_allowed() -> bool:
    """False inside :func:`no_downloads`."""
    return _ALLOWED.get()


@contextlib.contextmanager
def no_downloads() -> Iterator[None]:
    """While open, parts build without fetching anything (their weights come from elsewhere)."""
    token = _ALLOWED.set(False)
    try:
        yield
    finally:
        _ALLOWED.reset(token)
