"""Tables of named factories — the sweep's searches (:data:`~.search.SEARCHES`) and executors
(:data:`~.executor.EXECUTORS`) — and the one way a decorator adds to them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["adds_to"]

F = TypeVar("F")


def adds_to(table: dict[str, F], name: str) -> Callable[[F], F]:
    """A decorator that stores the factory it decorates in ``table`` under ``name`` and returns it unchanged
    (a later one of the same name replaces it, as a plug-in replacing a built-in expects)."""

    def decorate(factory: F) -> F:
        table[name] = factory
        return factory

    return decorate
