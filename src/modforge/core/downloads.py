"""Whether building something may fetch files over the network right now.

A part that can download published weights when it is built (``timm`` with ``hub: true``) or a
dataset that can fetch its official files (``download: true``) asks :func:`downloads_allowed`
first. Downloads are turned off (:func:`no_downloads`) while modforge builds from a *stored*
config — a checkpoint's, a run's ``config.yaml`` being resumed or tested, a teacher a stored
config points at (:mod:`.references`): such a config is data, and data never chooses what is
connected to (DESIGN.md, "Destinations are not data"). The model builder also turns them off
while it rebuilds a model whose weights come from a checkpoint (the download would be
overwritten at once). :func:`download_refusal` says why, for the one line the user sees.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["download_refusal", "downloads_allowed", "no_downloads"]

_REFUSAL: contextvars.ContextVar[str | None] = contextvars.ContextVar("modforge_download_refusal", default=None)


def downloads_allowed() -> bool:
    """False inside :func:`no_downloads`."""
    return _REFUSAL.get() is None


def download_refusal() -> str | None:
    """Why nothing may be downloaded now (``None``: downloads are allowed)."""
    return _REFUSAL.get()


@contextlib.contextmanager
def no_downloads(reason: str = "the weights come from a checkpoint") -> Iterator[None]:
    """While open, parts and datasets build without fetching anything; ``reason`` says why
    (the outermost reason is kept: it names what the user ran)."""
    token = _REFUSAL.set(_REFUSAL.get() or reason)
    try:
        yield
    finally:
        _REFUSAL.reset(token)
